// Package sitecache is the edge agent's part that runs the site's image
// cache for the nodes: its listener, the rewriting of a write_image
// step's image (and config drive URL) to go through it, and image
// pre-seeds. The cache itself (one download per image, checksums) is
// agent/imagecache's.
package sitecache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bmedge/bmedge/agent/fetchrule"
	"github.com/bmedge/bmedge/agent/imagecache"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/protocol"
)

// DefaultBytes is the image cache's size cap when none is given.
const DefaultBytes = 50 << 30

// DefaultConns are the listener's connection budgets: the nodes'
// ramdisks fetch their images. A connection is pending until its first
// request header is read.
var DefaultConns = netbudget.Limits{MaxConns: 1024, MaxPerSource: 64, MaxPendingPerSource: 16}

// Options configure the site's image cache (docs/imagecache.md).
// Without Dir there is none: nodes fetch their images from the origin.
type Options struct {
	// Dir holds the cached images (created 0700).
	Dir string
	// MaxBytes caps the cached images plus the downloads running (default
	// DefaultBytes); the least recently used go first.
	MaxBytes int64
	// Listen is where the site's nodes fetch images (host:port on the
	// site network); required with Dir.
	Listen string
	// URL is the cache as the nodes reach it, when not http://LISTEN
	// (behind NAT, or a name).
	URL string
	// FetchAllow are the networks the operator allows the cache to fetch
	// from although the fetch rule refuses them (loopback, link-local,
	// the BMCs'): the agent's --fetch-allow (agent/fetchrule).
	FetchAllow []netip.Prefix
	// BMCNets are the site's BMC networks (--bmc-network): refused
	// unless allowed.
	BMCNets []netip.Prefix
	// Conns are the listener's connection budgets (fields <= 0:
	// DefaultConns').
	Conns netbudget.Limits
}

// Config configures the site cache part.
type Config struct {
	Site string
	Log  *slog.Logger
	Opts Options
	// SimNodes is how many nodes the agent simulates: their ramdisks all
	// fetch from this host, one source for all of them.
	SimNodes int
	// Clock is the clock (default clock.Real): the config drive tokens'
	// lifetime and the image cache's (imagecache.Options.Clock).
	Clock clock.Clock
	// BMCs returns the BMC addresses the agent knows, and Own the
	// agent's other listeners (host:port): the fetch rule refuses them
	// (nil: none).
	BMCs, Own func() []string
}

// Cache is the site's image cache as the agent runs it; without
// Options.Dir it is off, and every method says so or leaves things be.
type Cache struct {
	cfg Config
	log *slog.Logger
	// on is set by Start once the cache runs; never changed after.
	on   bool
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
	// listenAddr is the listener's address as soon as it is bound (the
	// fetch rule refuses it).
	listenAddr atomic.Value
	// built serves the boot ISOs built of a kernel and a ramdisk
	// (bootiso.go), at builtBase + token.
	built     *builder
	builtBase string
}

// New returns the part; Start starts the cache when configured.
func New(cfg Config) *Cache {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	return &Cache{cfg: cfg, log: cfg.Log, passed: map[string]bool{}}
}

// firstPass tells whether src is logged as not cached for the first time.
func (sc *Cache) firstPass(src string) bool {
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

// Addr is the address the image cache listens on ("" without one).
func (sc *Cache) Addr() string {
	if !sc.on {
		return ""
	}
	return sc.addr
}

// Base is the URL prefix of the cached images as the nodes reach them
// ("" without a cache).
func (sc *Cache) Base() string {
	if !sc.on {
		return ""
	}
	return sc.base
}

// Start starts the site image cache when configured; stop ends it.
func (sc *Cache) Start(ctx context.Context) (stop func(), err error) {
	o := sc.cfg.Opts
	if o.Dir == "" {
		if o.Listen != "" || o.URL != "" {
			return nil, errors.New("--image-cache-listen and --image-cache-url go with --image-cache-dir, the folder of the site's image cache")
		}
		if len(o.FetchAllow) > 0 || len(o.BMCNets) > 0 {
			return nil, errors.New("--fetch-allow and --bmc-network go with --image-cache-dir: without a site image cache the edge agent fetches nothing on an operator's behalf (the ramdisks fetch their images themselves)")
		}
		return func() {}, nil
	}
	if o.Listen == "" {
		return nil, errors.New("--image-cache-dir needs --image-cache-listen: the address on the site network where the nodes fetch their images")
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultBytes
	}
	rule := sc.rule()
	c, err := imagecache.Open(imagecache.Options{Dir: o.Dir, MaxBytes: o.MaxBytes, Rule: rule, Log: sc.log, Clock: sc.cfg.Clock})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("--image-cache-listen %s: %w", o.Listen, err)
	}
	sc.listenAddr.Store(ln.Addr().String())
	base := strings.TrimSuffix(o.URL, "/")
	if base == "" {
		base = "http://" + ln.Addr().String()
	}
	lim := o.Conns.Or(DefaultConns)
	if n := sc.cfg.SimNodes; n > 0 {
		// The simulated nodes' ramdisks all fetch from this host: one
		// source for all of them.
		lim.MaxConns += n
		lim.MaxPerSource += n
		lim.MaxPendingPerSource += n
	}
	ln = netbudget.Default().Wrap(ln, netbudget.Options{Name: "image-cache", Limits: lim.Or(DefaultConns), Log: sc.log})
	mux := http.NewServeMux()
	mux.Handle(imagecache.PathPrefix, c.Handler())
	drives := newDriveProxy(rule, sc.log, sc.cfg.Clock)
	mux.Handle(DrivePathPrefix, drives)
	built := newBuilder(sc.log)
	mux.Handle(BuiltPathPrefix, built)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ConnState: netbudget.ConnState(nil)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			sc.log.Error("image cache listener stopped", "err", err)
		}
	}()
	sc.c, sc.base, sc.addr, sc.drives, sc.driveBase = c, base+imagecache.PathPrefix, ln.Addr().String(), drives, base+DrivePathPrefix
	sc.built, sc.builtBase = built, base+BuiltPathPrefix
	sc.on = true
	st := c.Stats()
	sc.log.Info("image cache up: nodes fetch their images from "+sc.base+"…", "listen", sc.addr, "dir", o.Dir,
		"max_bytes", o.MaxBytes, "images", st.Images, "bytes", st.Bytes)
	return func() {
		_ = srv.Close()
		c.Close()
		built.close()
	}, nil
}

// rule is the fetch rule of the cache's fetches: the agent's listeners,
// this one's included, and the BMCs refused; the operator's allowance.
func (sc *Cache) rule() *fetchrule.Rule {
	o := sc.cfg.Opts
	return &fetchrule.Rule{Allow: o.FetchAllow, BMCNets: o.BMCNets, BMCs: sc.cfg.BMCs,
		Own: func() []string {
			var own []string
			if sc.cfg.Own != nil {
				own = sc.cfg.Own()
			}
			if a, _ := sc.listenAddr.Load().(string); a != "" {
				own = append(own, a)
			}
			return own
		}}
}

// ImageArgs returns the in-band command the ramdisk gets: a write_image
// step's image_source is replaced by the cache's URL for it when the
// cache is on. m is not changed. An image the cache cannot take (no
// checksum, not http(s)) is left to the ramdisk, which fetches it itself.
func (sc *Cache) ImageArgs(m *protocol.Message) *protocol.Message {
	if !sc.on || m.Step == nil || m.Step.Interface != "deploy" || m.Step.Step != "write_image" {
		return m
	}
	m = sc.driveArgs(m)
	w := protocol.WriteImageArgsOf(m.Step.Args)
	src := w.ImageSource
	if src == "" || strings.HasPrefix(src, sc.base) {
		return m
	}
	sum, err := imagecache.ParseChecksum(w.ImageChecksum, w.HashAlgo, w.HashValue)
	if err == nil {
		err = imagecache.CheckURL(src)
	}
	var token string
	if err == nil {
		token, err = sc.c.Register(src, sum)
	}
	if err != nil {
		if sc.firstPass(src) {
			sc.log.Warn("image not taken through the site cache; the nodes fetch it from its origin (logged once per image)", "node", m.Node, "url", imagecache.Redact(src), "reason", err)
		}
		return m
	}
	c := *m
	step := *m.Step
	step.Args = protocol.WithImageSource(m.Step.Args, sc.base+token)
	c.Step = &step
	return &c
}

// BlobURL fetches a firmware image into the cache and verifies its
// checksum (once per site: every node naming the same URL and checksum
// shares the one download), then returns the URL the site's BMCs fetch
// it from: the cache's, under the image's token. The origin URL and its
// credentials never reach a BMC, and a BMC never sees an image whose
// checksum did not match.
func (sc *Cache) BlobURL(ctx context.Context, src, checksum string) (string, error) {
	if !sc.on {
		return "", fmt.Errorf("the edge agent of site %s has no image cache (start it with --image-cache-dir and --image-cache-listen): firmware images reach the BMCs only through it, checksum verified", sc.cfg.Site)
	}
	sum, err := imagecache.ParseChecksum(checksum, "", "")
	if err != nil {
		return "", err
	}
	if _, err := sc.c.Fetch(ctx, src, sum); err != nil {
		return "", err
	}
	token, err := sc.c.Register(src, sum)
	if err != nil {
		return "", err
	}
	return sc.base + token, nil
}

// MediaURL fetches a boot ISO (a ramdisk deploy's instance_info
// boot_iso) into the cache under the fetch rule, with no checksum (Ironic
// takes boot_iso without one: imagecache.Unverified), and returns the
// URL the site's BMCs fetch it from: the cache's, under the image's
// token. The origin URL and its credentials never reach a BMC; every
// node naming the same URL shares the one download.
func (sc *Cache) MediaURL(ctx context.Context, src string) (string, error) {
	if !sc.on {
		return "", fmt.Errorf("the edge agent of site %s has no image cache (start it with --image-cache-dir and --image-cache-listen): a ramdisk deploy's boot_iso reaches the BMCs only through it", sc.cfg.Site)
	}
	if _, err := sc.c.Fetch(ctx, src, imagecache.Unverified); err != nil {
		return "", err
	}
	token, err := sc.c.Register(src, imagecache.Unverified)
	if err != nil {
		return "", err
	}
	return sc.base + token, nil
}

// Preseed fetches a cache_image command's image into the cache, within
// ctx.
func (sc *Cache) Preseed(ctx context.Context, m *protocol.Message) (imagecache.Result, error) {
	if !sc.on {
		return imagecache.Result{}, fmt.Errorf("the edge agent of site %s has no image cache (start it with --image-cache-dir and --image-cache-listen)", sc.cfg.Site)
	}
	c := protocol.CacheImageArgsOf(m.Args)
	u := c.URL
	sum, err := imagecache.ParseChecksum(c.Checksum, "", "")
	if err != nil {
		return imagecache.Result{}, err
	}
	return sc.c.Fetch(ctx, u, sum)
}
