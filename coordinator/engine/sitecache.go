package engine

import (
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/lib/imagechecksum"
	"github.com/bmedge/bmedge/protocol"
)

// CacheImageTimeout is the deadline of a pre-seed command: an image may
// take hours over a slow link.
const CacheImageTimeout = 12 * time.Hour

// maxCacheRecords bounds the pre-seeds remembered per coordinator.
const maxCacheRecords = 1000

// CacheStatus is what the coordinator knows of one pre-seed of a site's
// image cache (coordinator site cache). It lives in memory only: after a
// restart of the coordinator, asking again answers from the site (the
// agent says at once when the image is already cached).
type CacheStatus struct {
	Site      string `json:"site"`
	URL       string `json:"url"`
	Checksum  string `json:"checksum"`
	CommandID string `json:"command_id"`
	// State is "pending" (sent, no result yet), "cached" or "failed".
	State         string     `json:"state"`
	Error         string     `json:"error,omitempty"`
	Size          int64      `json:"size,omitempty"`
	AlreadyCached bool       `json:"already_cached,omitempty"`
	Seconds       float64    `json:"seconds,omitempty"`
	RequestedAt   time.Time  `json:"requested_at"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
	deadline      time.Time
}

// cacheBook holds an engine's pre-seeds by command id.
type cacheBook struct {
	mu   sync.Mutex
	byID map[string]*CacheStatus
}

func (e *Engine) cacheBook() *cacheBook { return e.siteSt.cache }

// CacheImage asks a site's edge agent to download an image into its cache
// ahead of deploys. With commandID, it asks about that earlier request
// instead: the command is sent again while it is pending (the agent runs
// it once and answers a duplicate with its result), and its outcome is
// returned once known.
func (e *Engine) CacheImage(site, imageURL, checksum, commandID string) (CacheStatus, error) {
	if !e.sites.Has(site) {
		return CacheStatus{}, errorf(NotFound, "site %s could not be found; 'coordinator site list' shows the sites", site)
	}
	book := e.cacheBook()
	now := e.cfg.Clock.Now()
	book.mu.Lock()
	defer book.mu.Unlock()
	if commandID != "" {
		st, ok := book.byID[commandID]
		if !ok || st.Site != site {
			return CacheStatus{}, errorf(NotFound, "pre-seed %s of site %s is not known to this coordinator (it remembers the last %d, in memory); ask again without command_id", commandID, site, maxCacheRecords)
		}
		if st.State == "pending" && now.Before(st.deadline) {
			e.sendCacheImage(st)
		}
		if st.State == "pending" && !now.Before(st.deadline) {
			st.State, st.Error = "failed", "no result from the site's edge agent before the command's deadline"
			st.FinishedAt = &now
		}
		return *st, nil
	}
	if err := checkImageURL(imageURL); err != nil {
		return CacheStatus{}, err
	}
	sum, err := normalChecksum(checksum, e.cfg.Machine.AllowMD5Checksum)
	if err != nil {
		return CacheStatus{}, err
	}
	st := &CacheStatus{Site: site, URL: imageURL, Checksum: sum, CommandID: randomHex(), State: "pending",
		RequestedAt: now, deadline: now.Add(CacheImageTimeout)}
	if len(book.byID) >= maxCacheRecords {
		var oldest *CacheStatus
		for _, x := range book.byID {
			if oldest == nil || x.RequestedAt.Before(oldest.RequestedAt) {
				oldest = x
			}
		}
		delete(book.byID, oldest.CommandID)
	}
	book.byID[st.CommandID] = st
	e.cfg.Log.Info("site cache pre-seed requested", "site", site, "url", redactURL(imageURL), "command", st.CommandID)
	e.sendCacheImage(st)
	return *st, nil
}

// sendCacheImage publishes a pre-seed's command; book.mu is held.
func (e *Engine) sendCacheImage(st *CacheStatus) {
	msg := &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: st.CommandID, Site: st.Site, Sent: e.cfg.Clock.Now(),
		Action: protocol.ActionCacheImage, Args: protocol.CacheImageArgs{URL: st.URL, Checksum: st.Checksum}.Args(), Deadline: st.deadline}
	e.enqueue(fsm.Outgoing{Topic: protocol.BMCCmdTopic(st.Site), Msg: msg}, true)
}

// handleSiteResult takes the result of a site-wide command (cache_image),
// which names no node, records it and acknowledges it.
func (e *Engine) handleSiteResult(site string, msg *protocol.Message) {
	book := e.cacheBook()
	book.mu.Lock()
	st := book.byID[msg.CommandID]
	if st != nil && st.Site == site && st.State == "pending" {
		now := e.cfg.Clock.Now()
		st.FinishedAt = &now
		if msg.OK {
			st.State = "cached"
			if v, ok := msg.Data["size"].(float64); ok {
				st.Size = int64(v)
			}
			st.AlreadyCached, _ = msg.Data["already_cached"].(bool)
			st.Seconds, _ = msg.Data["seconds"].(float64)
		} else {
			st.State, st.Error = "failed", msg.Error
		}
	}
	book.mu.Unlock()
	if msg.OK {
		e.cfg.Log.Info("site cache pre-seed done", "site", site, "command", msg.CommandID, "size", msg.Data["size"], "already_cached", msg.Data["already_cached"])
	} else {
		e.cfg.Log.Warn("site cache pre-seed failed", "site", site, "command", msg.CommandID, "error", msg.Error)
	}
	_ = e.submit(func(t *tx) error {
		e.noteSiteHeard(t, site)
		ack := protocol.BMCCmdTopic(site)
		t.acks[ack] = append(t.acks[ack], msg.ID)
		return nil
	}, false)
}

func checkImageURL(u string) error {
	if u == "" {
		return errorf(Invalid, "the image URL is missing; give the http(s) URL the nodes would deploy (instance_info image_source)")
	}
	if len(u) > 8192 {
		return errorf(Invalid, "the image URL is %d bytes long; the limit is 8192", len(u))
	}
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return errorf(Invalid, "image URL %q is not an http:// or https:// URL; the site cache fetches HTTP(S) images only", redactURL(u))
	}
	return nil
}

// normalChecksum checks an image checksum as the site cache takes it
// for a deploy (ALGO:HEX, or HEX of sha256 or sha512 by its length; md5
// and sha1 only when the coordinator allows them, as a deploy does) and
// returns it as ALGO:HEX.
func normalChecksum(s string, allowMD5 bool) (string, error) {
	if strings.TrimSpace(s) == "" {
		return "", errorf(Invalid, "the image checksum is missing: the site cache keeps only images it can verify; give --checksum sha256:HEX (the image's instance_info image_checksum)")
	}
	c, err := imagechecksum.ParseDigest(s, "")
	if err != nil {
		return "", errorf(Invalid, "%v", err)
	}
	switch {
	case c.Algo == imagechecksum.SHA256 || c.Algo == imagechecksum.SHA512:
		return c.String(), nil
	case imagechecksum.Legacy(c.Algo) && allowMD5:
		return c.String(), nil
	case imagechecksum.Legacy(c.Algo):
		// The cache would take it, but a deploy of it is refused, so it
		// would be a WAN download for nothing.
		return "", errorf(Invalid, "image checksum %q is %s, which a deploy does not take on this coordinator (the operator allows md5 and sha1 with serve --allow-md5-checksum, Ironic's [agent]allow_md5_checksum): give sha256:HEX (64 hex digits) or sha512:HEX (128)", s, c.Algo)
	}
	return "", errorf(Invalid, "image checksum %q is %s, which a deploy does not take (the ramdisk verifies sha256 or sha512): give sha256:HEX (64 hex digits) or sha512:HEX (128)", s, c.Algo)
}

// redactURL leaves out a URL's query string (often a signature) and password.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil && p.User != nil {
		p.User = url.User("…")
		u = p.String()
	}
	if base, _, ok := strings.Cut(u, "?"); ok {
		return base + "?…"
	}
	return u
}
