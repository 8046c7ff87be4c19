package agent

import (
	"context"

	"github.com/bmedge/bmedge/protocol"
)

// ImageCacheOptions configure the site's image cache. Not built yet.
type ImageCacheOptions struct{}

// startImageCache starts the site image cache when configured.
func (a *Agent) startImageCache(ctx context.Context) (stop func(), err error) {
	return func() {}, nil
}

// imageArgs returns the in-band command the ramdisk gets: a write_image
// step's image_source is replaced by the cache's URL for it when the
// cache is on. m is not changed.
func (a *Agent) imageArgs(m *protocol.Message) *protocol.Message { return m }

// cacheImageCommand runs a cache_image command (coordinator site cache)
// and sends its result.
func (a *Agent) cacheImageCommand(m *protocol.Message) {
	res := &protocol.Message{Kind: protocol.KindResult, ID: newID(), Site: a.cfg.Site, CommandID: m.ID,
		Error: "this edge agent has no image cache (start it with --image-cache-dir)"}
	a.send(protocol.BMCEvtTopic(a.cfg.Site), res, m.Deadline)
}

// simFetchImage is what a simulated ramdisk's write_image does with its
// image: nothing without the cache.
func simFetchImage(ctx context.Context, url, checksum string) error { return nil }
