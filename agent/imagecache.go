package agent

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/agent/imagecache"
	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/protocol/netbudget"
)

// DefaultImageCacheBytes is the image cache's size cap when none is given.
const DefaultImageCacheBytes = 50 << 30

// ImageCacheOptions configure the site's image cache (docs/imagecache.md).
// Without Dir there is none: nodes fetch their images from the origin.
type ImageCacheOptions struct {
	// Dir holds the cached images (created 0700).
	Dir string
	// MaxBytes caps the cached images plus the downloads running (default
	// DefaultImageCacheBytes); the least recently used go first.
	MaxBytes int64
	// Listen is where the site's nodes fetch images (host:port on the
	// site network); required with Dir.
	Listen string
	// URL is the cache as the nodes reach it, when not http://LISTEN
	// (behind NAT, or a name).
	URL string
	// Client fetches from the origins (nil: imagecache's default).
	Client *http.Client
	// Conns are the listener's connection budgets (fields <= 0:
	// DefaultImageCacheConns').
	Conns netbudget.Limits
}

// siteCache is a running image cache.
type siteCache struct {
	c    *imagecache.Cache
	base string // URL prefix of the images as the nodes reach them
	addr string // address bound
	// passed holds the image URLs already logged as not taken through
	// the cache (a resent command or ten thousand nodes log it once).
	mu     sync.Mutex
	passed map[string]bool
	// drives passes config drive URLs through (configdrive.go), at
	// driveBase + token.
	drives    *driveProxy
	driveBase string
}

// firstPass tells whether src is logged as not cached for the first time.
func (sc *siteCache) firstPass(src string) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.passed[src] {
		return false
	}
	if len(sc.passed) >= 1000 {
		clear(sc.passed)
	}
	sc.passed[src] = true
	return true
}

// caches holds the running image cache of each agent of this process
// (*Agent → *siteCache); simFetchImage looks there to tell a cache URL.
func (a *Agent) imageCache() *siteCache { return a.cache }

// ImageCacheAddr is the address the image cache listens on ("" without one).
func (a *Agent) ImageCacheAddr() string {
	if sc := a.imageCache(); sc != nil {
		return sc.addr
	}
	return ""
}

// startImageCache starts the site image cache when configured.
func (a *Agent) startImageCache(ctx context.Context) (stop func(), err error) {
	o := a.cfg.Cache
	if o.Dir == "" {
		if o.Listen != "" || o.URL != "" {
			return nil, errors.New("--image-cache-listen and --image-cache-url go with --image-cache-dir, the folder of the site's image cache")
		}
		return func() {}, nil
	}
	if o.Listen == "" {
		return nil, errors.New("--image-cache-dir needs --image-cache-listen: the address on the site network where the nodes fetch their images")
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultImageCacheBytes
	}
	c, err := imagecache.Open(imagecache.Options{Dir: o.Dir, MaxBytes: o.MaxBytes, Client: o.Client, Log: a.log})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("--image-cache-listen %s: %w", o.Listen, err)
	}
	base := strings.TrimSuffix(o.URL, "/")
	if base == "" {
		base = "http://" + ln.Addr().String()
	}
	lim := o.Conns.Or(DefaultImageCacheConns)
	if n := a.cfg.Sim.Nodes; n > 0 {
		// The simulated nodes' ramdisks all fetch from this host: one
		// source for all of them.
		lim.MaxConns += n
		lim.MaxPerSource += n
		lim.MaxPendingPerSource += n
	}
	ln = budgeted(ln, "image-cache", lim, DefaultImageCacheConns, a.log)
	mux := http.NewServeMux()
	mux.Handle(imagecache.PathPrefix, c.Handler())
	drives := newDriveProxy(o.Client)
	mux.Handle(DrivePathPrefix, drives)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ConnState: netbudget.ConnState(nil)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("image cache listener stopped", "err", err)
		}
	}()
	sc := &siteCache{c: c, base: base + imagecache.PathPrefix, addr: ln.Addr().String(), passed: map[string]bool{},
		drives: drives, driveBase: base + DrivePathPrefix}
	a.cache = sc
	st := c.Stats()
	a.log.Info("image cache up: nodes fetch their images from "+sc.base+"…", "listen", sc.addr, "dir", o.Dir,
		"max_bytes", o.MaxBytes, "images", st.Images, "bytes", st.Bytes)
	return func() {
		_ = srv.Close()
		c.Close()
	}, nil
}

// imageArgs returns the in-band command the ramdisk gets: a write_image
// step's image_source is replaced by the cache's URL for it when the
// cache is on. m is not changed. An image the cache cannot take (no
// checksum, not http(s)) is left to the ramdisk, which fetches it itself.
func (a *Agent) imageArgs(m *protocol.Message) *protocol.Message {
	sc := a.imageCache()
	if sc == nil || m.Step == nil || m.Step.Interface != "deploy" || m.Step.Step != "write_image" {
		return m
	}
	m = sc.driveArgs(m)
	str := func(k string) string { v, _ := m.Step.Args[k].(string); return v }
	src := str("image_source")
	if src == "" || strings.HasPrefix(src, sc.base) {
		return m
	}
	sum, err := imagecache.ParseChecksum(str("image_checksum"), str("image_os_hash_algo"), str("image_os_hash_value"))
	if err == nil {
		err = imagecache.CheckURL(src)
	}
	var token string
	if err == nil {
		token, err = sc.c.Register(src, sum)
	}
	if err != nil {
		if sc.firstPass(src) {
			a.log.Warn("image not taken through the site cache; the nodes fetch it from its origin (logged once per image)", "node", m.Node, "url", imagecache.Redact(src), "reason", err)
		}
		return m
	}
	c := *m
	step := *m.Step
	step.Args = maps.Clone(m.Step.Args)
	step.Args["image_source"] = sc.base + token
	c.Step = &step
	return &c
}

// cacheImageCommand runs a cache_image command (coordinator site cache)
// and sends its result.
func (a *Agent) cacheImageCommand(m *protocol.Message) {
	a.ob.Once(outbox.Command{Msg: m, Run: func() *protocol.Message { return a.cacheImage(m) }})
}

// cacheImage pre-seeds the image and returns the result (nil when the
// agent is stopping).
func (a *Agent) cacheImage(m *protocol.Message) *protocol.Message {
	u, _ := m.Args["url"].(string)
	res := &protocol.Message{Kind: protocol.KindResult, ID: outbox.NewID(), Site: a.cfg.Site, CommandID: m.ID}
	r, err := a.preseed(m)
	if err != nil && a.ctx.Err() != nil {
		a.log.Info("edge agent stopping: image pre-seed interrupted, no result kept", "url", imagecache.Redact(u), "command", m.ID)
		return nil
	}
	if err != nil {
		res.Error = err.Error()
		a.log.Warn("image pre-seed failed", "url", imagecache.Redact(u), "command", m.ID, "err", err)
	} else {
		res.OK = true
		res.Data = map[string]any{"url": imagecache.Redact(u), "size": r.Size, "already_cached": r.AlreadyCached, "seconds": r.Duration.Seconds()}
		a.log.Info("image pre-seeded in the site cache", "url", imagecache.Redact(u), "size", r.Size, "already_cached", r.AlreadyCached,
			"seconds", r.Duration.Seconds(), "command", m.ID)
	}
	res.Sent = time.Now()
	return res
}

func (a *Agent) preseed(m *protocol.Message) (imagecache.Result, error) {
	sc := a.imageCache()
	if sc == nil {
		return imagecache.Result{}, fmt.Errorf("the edge agent of site %s has no image cache (start it with --image-cache-dir and --image-cache-listen)", a.cfg.Site)
	}
	u, _ := m.Args["url"].(string)
	cs, _ := m.Args["checksum"].(string)
	sum, err := imagecache.ParseChecksum(cs, "", "")
	if err != nil {
		return imagecache.Result{}, err
	}
	ctx, cancel := context.WithDeadline(a.ctx, m.Deadline.Add(-resultMargin(time.Until(m.Deadline))))
	defer cancel()
	return sc.c.Fetch(ctx, u, sum)
}

// simFetchImage is what a simulated ramdisk's write_image does with its
// image: when its image_source is an image cache of this process (the
// agent took the image through its cache), it downloads it as a real
// ramdisk would and verifies the checksum, so that simulated deploys
// exercise the cache. simWriteImage (simramdisk.go) calls it, after the
// ramdisk's checksum rule, and fetches any other URL from its origin.
func (a *Agent) simFetchImage(ctx context.Context, url string, args map[string]any) error {
	if a.cache == nil || !strings.HasPrefix(url, a.cache.base) {
		return nil
	}
	str := func(k string) string { v, _ := args[k].(string); return v }
	sum, err := imagecache.ParseChecksum(str("image_checksum"), str("image_os_hash_algo"), str("image_os_hash_value"))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot download the image from the site cache: %w", err)
	}
	defer resp.Body.Close()
	if err := cacheRefused(resp); err != nil {
		return err
	}
	h := imagecache.NewHash(sum)
	n, err := io.Copy(h, resp.Body)
	if err != nil {
		err = fmt.Errorf("image download from the site cache was cut after %d bytes (%w)", n, err)
		// As a ramdisk that retries would: the cache remembers why its
		// download failed for a while and says so.
		if again, aerr := http.DefaultClient.Do(req.Clone(ctx)); aerr == nil {
			if why := cacheRefused(again); why != nil {
				err = fmt.Errorf("%w; %w", err, why)
			}
			again.Body.Close()
		}
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum.Hex {
		return fmt.Errorf("image from the site cache has %s %s, expected %s", sum.Algo, got, sum.Hex)
	}
	return nil
}

// cacheRefused is the error of a cache answer that is not the image.
func cacheRefused(resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return fmt.Errorf("the site cache answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
}
