// Package imagecache is a site's image cache: the edge agent fetches each
// image over the WAN once, verifies its checksum, keeps it on disk under a
// size cap (least recently used first out), and serves it to the site's
// nodes over HTTP.
//
// The first request for an image starts its download; every request that
// comes while it runs reads the same download as it grows (single flight),
// so ten nodes deploying one image at once move it over the WAN once. The
// bytes land in a temporary file that is renamed into place only after the
// checksum matched: a partial or unverified file is never served as
// complete. A reader of a running download never gets the last byte before
// the checksum is verified, so a client that sees a clean end of the
// transfer has the verified image; on a mismatch (or an origin failure)
// every reader fails, and the HTTP handler aborts its connection.
//
// Images are served under /images/TOKEN, where TOKEN is an HMAC of the
// image's URL and checksum under a secret kept in the cache folder: the
// agent registers an image (Register) when a coordinator's command names
// it, and site-network clients can only ask for registered images, never
// make the agent fetch a URL of their choosing.
package imagecache

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/agent/fetchrule"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/imagechecksum"
)

// Defaults.
const (
	DefaultStallTimeout = 2 * time.Minute
	// MaxURLBytes bounds an image URL.
	MaxURLBytes = 8192
	// MaxRegistered bounds the images registered and not cached; the
	// oldest registration is forgotten first.
	MaxRegistered = 10000
	// FailureMemory is how long a failed download is answered from memory.
	FailureMemory = 30 * time.Second
)

// Options configure a Cache.
type Options struct {
	// Dir holds the images (created 0700 if missing).
	Dir string
	// MaxBytes caps the bytes of the cached images plus the downloads
	// running; the least recently used images are removed to make room.
	// An image larger than the cap is refused.
	MaxBytes int64
	// Rule is what the cache may fetch from (agent/fetchrule; nil: the
	// zero rule, which refuses loopback and link-local origins). The
	// client has connect, TLS and response-header timeouts and no
	// overall one (images are large; StallTimeout bounds a stall).
	Rule *fetchrule.Rule
	// StallTimeout fails a download that receives no byte for this long
	// (default DefaultStallTimeout).
	StallTimeout time.Duration
	Log          *slog.Logger
	// Clock (default clock.Real) times the images' last use (which the
	// cache evicts first) and the memory of failed downloads. A download's
	// stall timeout and the durations measured stay on the system clock:
	// they time the network.
	Clock clock.Clock
}

// Cache is a site's image cache. Its methods are safe for concurrent use.
type Cache struct {
	opts   Options
	client *http.Client
	log    *slog.Logger
	secret []byte
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	entries map[string]*entry // key → cached or downloading image
	images  map[string]*image // key → registered image (URL and checksum)
	tokens  map[string]string // token → key
	used    int64             // bytes of cached files plus download reservations
	// failed holds the recent failed downloads: nodes asking for the
	// image within FailureMemory get the error at once instead of making
	// the agent fetch it over the WAN again (a pre-seed always retries).
	failed map[string]failure
}

type failure struct {
	err error
	at  time.Time
}

type image struct {
	url   string
	sum   Checksum
	key   string
	token string
	at    time.Time
}

// entry is an image on disk: complete when fl is nil.
type entry struct {
	key     string
	size    int64
	lastUse time.Time
	fl      *flight
}

// flight is one running download; readers follow its temporary file.
type flight struct {
	img      *image
	started  chan struct{} // closed once total is known (or done)
	mu       sync.Mutex
	file     *os.File // the temporary file, shared by the writer and readers (pread)
	refs     int      // the writer and each open reader
	written  int64
	total    int64 // from the origin's Content-Length, -1 unknown
	reserved int64
	done     bool
	err      error
	changed  chan struct{} // closed and replaced at every change
}

// Open opens (or creates) the cache in opts.Dir. Complete images of an
// earlier run are kept; leftovers of interrupted downloads are removed.
func Open(opts Options) (*Cache, error) {
	if opts.Dir == "" {
		return nil, errors.New("image cache: no folder given")
	}
	if opts.MaxBytes <= 0 {
		return nil, errors.New("image cache: the size cap must be positive")
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = DefaultStallTimeout
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	opts.Clock = clock.Or(opts.Clock)
	if opts.Rule == nil {
		opts.Rule = &fetchrule.Rule{}
	}
	client := opts.Rule.Client(0)
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("image cache: create folder: %w", err)
	}
	// An existing folder is made private too: the cached images are the
	// site's, and token.key signs the nodes' URLs.
	if fi, err := os.Stat(opts.Dir); err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	} else if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(opts.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("image cache: the folder %s has mode %04o and cannot be made 0700 (%v): give the agent a folder of its own", opts.Dir, fi.Mode().Perm(), err)
		}
		opts.Log.Info("image cache: the folder was made private (0700)", "dir", opts.Dir, "was", fmt.Sprintf("%04o", fi.Mode().Perm()))
	}
	secret, err := loadSecret(filepath.Join(opts.Dir, "token.key"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cache{opts: opts, client: client, log: opts.Log, secret: secret, ctx: ctx, cancel: cancel,
		entries: map[string]*entry{}, images: map[string]*image{}, tokens: map[string]string{}, failed: map[string]failure{}}
	des, err := os.ReadDir(opts.Dir)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("image cache: read folder: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		p := filepath.Join(opts.Dir, name)
		switch {
		case strings.HasSuffix(name, ".part"):
			// An interrupted download: never complete.
			if err := os.Remove(p); err != nil {
				c.log.Warn("image cache: cannot remove an interrupted download", "file", p, "err", err)
			}
		case strings.HasSuffix(name, ".img") && isKey(strings.TrimSuffix(name, ".img")) && de.Type().IsRegular():
			info, err := de.Info()
			if err != nil {
				continue
			}
			key := strings.TrimSuffix(name, ".img")
			c.entries[key] = &entry{key: key, size: info.Size(), lastUse: info.ModTime()}
			c.tokens[c.token(key)] = key
			c.used += info.Size()
		}
	}
	if c.used > opts.MaxBytes {
		c.mu.Lock()
		_ = c.makeRoom(0)
		c.mu.Unlock()
	}
	return c, nil
}

// Close stops the running downloads (their readers fail) and waits for them.
func (c *Cache) Close() {
	c.cancel()
	c.wg.Wait()
}

func loadSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(b) == 32 {
		return b, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("image cache: read its key: %w", err)
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("image cache: write its key: %w", err)
	}
	return b, nil
}

func isKey(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// keyOf names an image on disk: the same URL with another checksum is
// another image.
func keyOf(u string, sum Checksum) string {
	h := sha256.Sum256([]byte(u + "\x00" + sum.String()))
	return hex.EncodeToString(h[:])
}

func (c *Cache) token(key string) string {
	m := hmac.New(sha256.New, c.secret)
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// Redact names an image URL for messages: its query string (often a
// signature, as in Swift temporary URLs) and any user information are
// left out.
func Redact(u string) string { return imagechecksum.RedactURL(u) }

// CheckURL says whether the cache can fetch u: an http(s) URL of bounded length.
func CheckURL(u string) error {
	if len(u) > MaxURLBytes {
		return fmt.Errorf("image URL is %d bytes long; the limit is %d", len(u), MaxURLBytes)
	}
	p, err := url.Parse(u)
	if err != nil {
		return fmt.Errorf("image URL %q is not valid: %v", Redact(u), err)
	}
	if (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return fmt.Errorf("image URL %q is not http:// or https://; the site cache fetches HTTP(S) images only", Redact(u))
	}
	return nil
}

// Register makes an image known to the cache and returns the token under
// which the handler serves it ("/images/TOKEN"). Nothing is fetched yet.
func (c *Cache) Register(u string, sum Checksum) (string, error) {
	img, err := c.register(u, sum)
	if err != nil {
		return "", err
	}
	return img.token, nil
}

func (c *Cache) register(u string, sum Checksum) (*image, error) {
	if err := CheckURL(u); err != nil {
		return nil, err
	}
	sum, err := checkSum(sum.Algo, sum.Hex)
	if err != nil {
		return nil, err
	}
	key := keyOf(u, sum)
	c.mu.Lock()
	defer c.mu.Unlock()
	if img, ok := c.images[key]; ok {
		img.at = c.opts.Clock.Now()
		return img, nil
	}
	if len(c.images) >= MaxRegistered {
		var oldest *image
		for _, x := range c.images {
			if e := c.entries[x.key]; e != nil && e.fl != nil {
				continue
			}
			if oldest == nil || x.at.Before(oldest.at) {
				oldest = x
			}
		}
		if oldest != nil {
			delete(c.images, oldest.key)
			if c.entries[oldest.key] == nil {
				delete(c.tokens, oldest.token)
			}
		}
	}
	img := &image{url: u, sum: sum, key: key, token: c.token(key), at: c.opts.Clock.Now()}
	c.images[key] = img
	c.tokens[img.token] = key
	return img, nil
}

// Result tells what Fetch did.
type Result struct {
	Size int64 `json:"size"`
	// AlreadyCached is true when the image was on disk before the call.
	AlreadyCached bool          `json:"already_cached"`
	Duration      time.Duration `json:"duration_ns"`
}

// Fetch makes sure the image is cached (pre-seeding): it starts or joins
// its download and waits until it is verified and on disk. If ctx ends
// first the download goes on.
func (c *Cache) Fetch(ctx context.Context, u string, sum Checksum) (Result, error) {
	start := time.Now()
	img, err := c.register(u, sum)
	if err != nil {
		return Result{}, err
	}
	c.mu.Lock()
	e := c.entries[img.key]
	if e != nil && e.fl == nil {
		e.lastUse = c.opts.Clock.Now()
		size := e.size
		c.mu.Unlock()
		return Result{Size: size, AlreadyCached: true, Duration: time.Since(start)}, nil
	}
	fl := c.startLocked(img)
	c.mu.Unlock()
	for {
		fl.mu.Lock()
		done, ferr, n, ch := fl.done, fl.err, fl.written, fl.changed
		fl.mu.Unlock()
		if done {
			return Result{Size: n, Duration: time.Since(start)}, ferr
		}
		select {
		case <-ctx.Done():
			return Result{}, fmt.Errorf("image %s still downloading (%d bytes so far): %w", Redact(u), n, ctx.Err())
		case <-ch:
		}
	}
}

// startLocked returns the image's running download, starting it if none
// runs. c.mu is held and the image is not complete.
func (c *Cache) startLocked(img *image) *flight {
	if e := c.entries[img.key]; e != nil && e.fl != nil {
		return e.fl
	}
	fl := &flight{img: img, started: make(chan struct{}), total: -1, refs: 1, changed: make(chan struct{})}
	c.entries[img.key] = &entry{key: img.key, fl: fl}
	c.wg.Add(1)
	go c.download(fl)
	return fl
}

// Stats describes the cache.
type Stats struct {
	Images      int   // complete images on disk
	Bytes       int64 // their bytes
	Downloading int
}

// Stats returns what the cache holds.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s Stats
	for _, e := range c.entries {
		if e.fl != nil {
			s.Downloading++
			continue
		}
		s.Images++
		s.Bytes += e.size
	}
	return s
}

// Cached tells whether the image is complete on disk.
func (c *Cache) Cached(u string, sum Checksum) bool {
	if s, err := checkSum(sum.Algo, sum.Hex); err == nil {
		sum = s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[keyOf(u, sum)]
	return e != nil && e.fl == nil
}

// makeRoom evicts least recently used complete images until n more bytes
// fit under the cap. c.mu is held.
func (c *Cache) makeRoom(n int64) error {
	if n > c.opts.MaxBytes {
		return fmt.Errorf("the image is %d bytes, larger than the whole site cache (%d bytes; agent --image-cache-size)", n, c.opts.MaxBytes)
	}
	for c.used+n > c.opts.MaxBytes {
		var victim *entry
		for _, e := range c.entries {
			if e.fl == nil && (victim == nil || e.lastUse.Before(victim.lastUse)) {
				victim = e
			}
		}
		if victim == nil {
			return fmt.Errorf("the site cache is full: downloads running hold %d of its %d bytes and %d more are needed (agent --image-cache-size)", c.used, c.opts.MaxBytes, n)
		}
		p := c.path(victim.key)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("image cache: cannot remove an evicted image", "file", p, "err", err)
		}
		delete(c.entries, victim.key)
		if img := c.images[victim.key]; img == nil {
			delete(c.tokens, c.token(victim.key))
		}
		c.used -= victim.size
		c.log.Info("image cache: evicted the least recently used image", "size", victim.size, "last_use", victim.lastUse.Format(time.RFC3339))
	}
	return nil
}

func (c *Cache) path(key string) string { return filepath.Join(c.opts.Dir, key+".img") }

// reserve takes n more bytes of the cap for a download.
func (c *Cache) reserve(fl *flight, n int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.makeRoom(n); err != nil {
		return err
	}
	c.used += n
	fl.reserved += n
	return nil
}

// stallReader fails a read that waits longer than the stall timeout.
type stallReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.timer.Reset(s.d)
	}
	return n, err
}

var errStalled = errors.New("stalled")

// download runs one flight to its end.
func (c *Cache) download(fl *flight) {
	defer c.wg.Done()
	img := fl.img
	start := time.Now()
	n, err := c.fetch(fl)
	c.mu.Lock()
	c.used -= fl.reserved
	if err == nil {
		c.entries[img.key] = &entry{key: img.key, size: n, lastUse: c.opts.Clock.Now()}
		c.used += n
		delete(c.failed, img.key)
	} else {
		delete(c.entries, img.key)
		now := c.opts.Clock.Now()
		for k, f := range c.failed {
			if now.Sub(f.at) > FailureMemory {
				delete(c.failed, k)
			}
		}
		c.failed[img.key] = failure{err: err, at: now}
	}
	c.mu.Unlock()
	if err != nil {
		c.log.Warn("image cache: download failed; nothing cached", "url", Redact(img.url), "err", account(err))
	} else {
		c.log.Info("image cache: image downloaded and verified", "url", Redact(img.url), "size", n, "checksum", img.sum.Algo,
			"seconds", time.Since(start).Seconds())
	}
	fl.finish(err)
	fl.release()
}

// fetch downloads into a temporary file and renames it into place once
// the checksum matched; on any failure the file is removed.
func (c *Cache) fetch(fl *flight) (n int64, err error) {
	img := fl.img
	ctx, cancel := context.WithCancelCause(c.ctx)
	defer cancel(nil)
	timer := time.AfterFunc(c.opts.StallTimeout, func() { cancel(errStalled) })
	defer timer.Stop()
	name := nodeURL(img.url)
	// fail is the failure of a transfer that did not go on: a stall or
	// the agent stopping explain it better than the error the
	// cancellation caused.
	fail := func(err *Failure) error {
		if errors.Is(context.Cause(ctx), errStalled) {
			return failed(http.StatusGatewayTimeout,
				fmt.Sprintf("the origin of image %s sent nothing for %s; the image was not cached: check the origin and the site's WAN link, then retry", name, c.opts.StallTimeout),
				fmt.Errorf("download of image %s stalled: no byte for %s", Redact(img.url), c.opts.StallTimeout))
		}
		if c.ctx.Err() != nil {
			return failed(http.StatusServiceUnavailable, "the edge agent is stopping; retry once it is back",
				fmt.Errorf("download of image %s interrupted: the edge agent is stopping", Redact(img.url)))
		}
		return err
	}
	// disk is a failure of the agent's own disk: its text (paths) stays
	// in the agent's log.
	disk := func(err error) error {
		return failed(http.StatusInternalServerError,
			fmt.Sprintf("the site cache cannot store image %s (a disk error, see the edge agent's log)", name), err)
	}
	resp, err := c.opts.Rule.Get(ctx, c.client, img.url)
	if err != nil {
		var rf *fetchrule.Refused
		if errors.As(err, &rf) {
			return 0, failed(http.StatusForbidden,
				fmt.Sprintf("image %s was not fetched: %s", name, fetchrule.Words(err)),
				fmt.Errorf("image %s refused by the fetch rule: %w", Redact(img.url), err))
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, fail(failed(http.StatusBadGateway,
			fmt.Sprintf("cannot fetch image %s from its origin %s: %s; check the URL, the origin and the site's WAN link, then retry", name, hostOf(img.url), fetchrule.Words(err)),
			fmt.Errorf("cannot download image %s from its origin: %w", Redact(img.url), err)))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// The origin's status stays in the agent's log: an answer of
		// a host the operator did not mean is nobody's business.
		return 0, failed(http.StatusBadGateway,
			fmt.Sprintf("the origin %s of image %s did not answer with the image (not 200 OK; the edge agent's log has its answer); check instance_info image_source and the origin", hostOf(img.url), name),
			fmt.Errorf("cannot download image %s: its origin answered %s, want 200 OK", Redact(img.url), resp.Status))
	}
	total := resp.ContentLength
	if total >= 0 {
		if err := c.reserve(fl, total); err != nil {
			return 0, failed(http.StatusInsufficientStorage, fmt.Sprintf("no room for image %s: %v", name, err),
				fmt.Errorf("cannot cache image %s: %w", Redact(img.url), err))
		}
	}
	f, err := os.CreateTemp(c.opts.Dir, img.key+".*.part")
	if err != nil {
		return 0, disk(fmt.Errorf("image cache: create a file: %w", err))
	}
	tmp := f.Name()
	fl.mu.Lock()
	fl.file, fl.total = f, total
	fl.mu.Unlock()
	close(fl.started)
	ok := false
	defer func() {
		if !ok {
			if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				c.log.Warn("image cache: cannot remove a failed download", "file", tmp, "err", rerr)
			}
		}
	}()
	h := img.sum.hash()
	body := &stallReader{r: resp.Body, timer: timer, d: c.opts.StallTimeout}
	buf := make([]byte, 1<<20)
	const grow = 64 << 20
	for {
		m, rerr := fill(body, buf)
		if m > 0 {
			if total >= 0 && n+int64(m) > total {
				return n, failed(http.StatusBadGateway,
					fmt.Sprintf("the origin sent more than the %d bytes of image %s it announced; the image was not cached: check the origin", total, name),
					fmt.Errorf("origin sent more than the %d bytes of image %s it announced", total, Redact(img.url)))
			}
			if total < 0 && n+int64(m) > fl.reserved {
				if err := c.reserve(fl, max(grow, int64(m))); err != nil {
					return n, failed(http.StatusInsufficientStorage, fmt.Sprintf("no room for image %s (%d bytes so far): %v", name, n, err),
						fmt.Errorf("cannot cache image %s (%d bytes so far): %w", Redact(img.url), n, err))
				}
			}
			if _, werr := f.WriteAt(buf[:m], n); werr != nil {
				return n, disk(fmt.Errorf("image cache: write: %w", werr))
			}
			h.Write(buf[:m])
			n += int64(m)
			fl.progress(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return n, fail(failed(http.StatusBadGateway,
				fmt.Sprintf("the origin's transfer of image %s broke after %d bytes (%v); the image was not cached: retry, and check the origin and the site's WAN link if it fails again", name, n, rerr),
				fmt.Errorf("download of image %s failed after %d bytes: %w", Redact(img.url), n, rerr)))
		}
	}
	if total >= 0 && n != total {
		return n, failed(http.StatusBadGateway,
			fmt.Sprintf("the origin sent %d of the %d bytes of image %s; the image was not cached: retry, and check the origin if it fails again", n, total, name),
			fmt.Errorf("origin sent %d of the %d bytes of image %s", n, total, Redact(img.url)))
	}
	got := hex.EncodeToString(h.Sum(nil))
	if img.sum != Unverified && got != img.sum.Hex {
		return n, failed(http.StatusBadGateway,
			fmt.Sprintf("checksum mismatch for image %s: its %s is not the %s given; the image was not cached: fix the image at its origin or the checksum in instance_info", name, img.sum.Algo, img.sum.Hex),
			fmt.Errorf("checksum mismatch for image %s: its %s is %s, expected %s; the image was not cached and no node got it",
				Redact(img.url), img.sum.Algo, got, img.sum.Hex))
	}
	if err := f.Sync(); err != nil {
		return n, disk(fmt.Errorf("image cache: sync: %w", err))
	}
	if err := os.Rename(tmp, c.path(img.key)); err != nil {
		return n, disk(fmt.Errorf("image cache: %w", err))
	}
	ok = true
	if d, err := os.Open(c.opts.Dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return n, nil
}

// fill reads into b until it is full or the reader fails; unlike
// io.ReadFull it passes the reader's error on as it is, so that a
// transfer cut short (io.ErrUnexpectedEOF from the HTTP client) is not
// taken for the end of the image.
func fill(r io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := r.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (fl *flight) progress(n int64) {
	fl.mu.Lock()
	fl.written = n
	close(fl.changed)
	fl.changed = make(chan struct{})
	fl.mu.Unlock()
}

func (fl *flight) finish(err error) {
	fl.mu.Lock()
	fl.done, fl.err = true, err
	close(fl.changed)
	fl.changed = make(chan struct{})
	fl.mu.Unlock()
	select {
	case <-fl.started:
	default:
		close(fl.started)
	}
}

// release drops a reference to the temporary file; the last one closes it.
func (fl *flight) release() {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.refs--
	if fl.refs == 0 && fl.file != nil {
		fl.file.Close()
		fl.file = nil
	}
}

// ErrUnknownImage says a token names no registered image.
var ErrUnknownImage = errors.New("no such image in the site cache")

// Reader reads a cached image, or a download as it runs: it returns the
// last byte, and io.EOF, only once the checksum is verified; if the
// download fails, Read returns its error.
type Reader struct {
	c    *Cache
	ctx  context.Context
	fl   *flight  // nil for a complete image
	file *os.File // a complete image
	off  int64
	size int64 // -1 unknown
}

// OpenToken opens the image registered under token, starting its download
// when it is not cached. It waits (within ctx) for the origin's answer, so
// that an origin that refuses the image fails here, and Size is known
// when the origin said it.
func (c *Cache) OpenToken(ctx context.Context, token string) (*Reader, error) {
	c.mu.Lock()
	key, ok := c.tokens[token]
	if !ok {
		c.mu.Unlock()
		return nil, ErrUnknownImage
	}
	if e := c.entries[key]; e != nil && e.fl == nil {
		f, err := os.Open(c.path(key))
		if err == nil {
			e.lastUse = c.opts.Clock.Now()
			c.mu.Unlock()
			return &Reader{c: c, ctx: ctx, file: f, size: e.size}, nil
		}
		// Gone from disk behind our back: fetch it again.
		c.log.Warn("image cache: a cached image is missing from disk; fetching it again", "err", err)
		delete(c.entries, key)
		c.used -= e.size
	}
	img := c.images[key]
	if img == nil {
		c.mu.Unlock()
		return nil, ErrUnknownImage
	}
	img.at = c.opts.Clock.Now()
	if f, ok := c.failed[key]; ok && clock.Since(c.opts.Clock, f.at) < FailureMemory && c.entries[key] == nil {
		c.mu.Unlock()
		return nil, f.err
	}
	fl := c.startLocked(img)
	fl.mu.Lock()
	fl.refs++
	fl.mu.Unlock()
	c.mu.Unlock()
	r := &Reader{c: c, ctx: ctx, fl: fl, size: -1}
	select {
	case <-fl.started:
	case <-ctx.Done():
		r.Close()
		return nil, ctx.Err()
	}
	fl.mu.Lock()
	size, ferr := fl.total, fl.err
	fl.mu.Unlock()
	r.size = size
	if ferr != nil {
		r.Close()
		return nil, ferr
	}
	return r, nil
}

// Size is the image's length, -1 when the origin did not say.
func (r *Reader) Size() int64 { return r.size }

// Complete tells whether the image was cached when it was opened.
func (r *Reader) Complete() bool { return r.fl == nil }

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	if r.file != nil {
		return r.file.Read(p)
	}
	if r.fl == nil {
		return 0, os.ErrClosed
	}
	fl := r.fl
	for {
		fl.mu.Lock()
		avail := fl.written
		if !fl.done {
			// The last byte waits for the checksum.
			avail--
		}
		if fl.err != nil {
			err := fl.err
			fl.mu.Unlock()
			return 0, err
		}
		if r.off < avail {
			n := int64(len(p))
			if n > avail-r.off {
				n = avail - r.off
			}
			f := fl.file
			fl.mu.Unlock()
			m, err := f.ReadAt(p[:n], r.off)
			r.off += int64(m)
			if err != nil && m == 0 {
				return 0, err
			}
			return m, nil
		}
		if fl.done {
			fl.mu.Unlock()
			return 0, io.EOF
		}
		ch := fl.changed
		fl.mu.Unlock()
		select {
		case <-ch:
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
}

// Close releases the reader.
func (r *Reader) Close() error {
	if r.file != nil {
		err := r.file.Close()
		r.file = nil
		return err
	}
	if r.fl != nil {
		r.fl.release()
		r.fl = nil
	}
	return nil
}
