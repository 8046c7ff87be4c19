package sitecache

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/agent/fetchrule"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// Config drives given as a URL reach the node through the site's image
// cache listener, as images do, but are never stored: a config drive
// holds secrets (keys, user_data) and must be gone from the site once the
// deploy ends. The write_image command's configdrive URL is replaced by
// DrivePathPrefix + a random token; a GET of it fetches the origin and
// streams the answer through, at most maxDriveBytes, from memory. A
// token lives for driveTTL (a deploy's ramdisk fetches it within
// minutes) and names one command's URL.

// DrivePathPrefix is where the site cache's listener serves config drives.
const DrivePathPrefix = "/configdrive/"

const (
	// maxDriveBytes bounds a config drive download: the base64 text of
	// a gzipped image of at most 64 MiB (Ironic's limit).
	maxDriveBytes = 64<<20/3*4 + 64<<10
	driveTTL      = time.Hour
	// driveTimeout bounds a config drive's fetch from its origin.
	driveTimeout = 5 * time.Minute
	maxDrives    = 10000
)

type driveEntry struct {
	url     string
	cmd     string
	expires time.Time
}

// driveProxy is the site cache's config drive pass-through.
type driveProxy struct {
	rule   *fetchrule.Rule
	client *http.Client
	log    *slog.Logger
	clock  clock.Clock // the tokens' lifetime
	mu     sync.Mutex
	byTok  map[string]driveEntry
	byCmd  map[string]string
}

func newDriveProxy(rule *fetchrule.Rule, log *slog.Logger, clk clock.Clock) *driveProxy {
	return &driveProxy{rule: rule, client: rule.Client(driveTimeout), log: log, clock: clock.Or(clk), byTok: map[string]driveEntry{}, byCmd: map[string]string{}}
}

// token returns the token of command cmd's config drive URL u, making one
// when the command is new (a resent command keeps its token).
func (p *driveProxy) token(cmd, u string) (string, error) {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	// A resent command keeps its token while it is alive; an expired
	// one is replaced below, never handed out again.
	if t, ok := p.byCmd[cmd]; ok && p.byTok[t].url == u && !now.After(p.byTok[t].expires) {
		return t, nil
	}
	for t, e := range p.byTok {
		if now.After(e.expires) {
			delete(p.byTok, t)
			delete(p.byCmd, e.cmd)
		}
	}
	if len(p.byTok) >= maxDrives {
		return "", errors.New("too many config drives pending at this site")
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	t := hex.EncodeToString(b)
	p.byTok[t] = driveEntry{url: u, cmd: cmd, expires: now.Add(driveTTL)}
	p.byCmd[cmd] = t
	return t, nil
}

func (p *driveProxy) lookup(t string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.byTok[t]
	if !ok || p.clock.Now().After(e.expires) {
		return "", false
	}
	return e.url, true
}

// ServeHTTP streams the config drive of a token from its origin, once
// the origin is one the fetch rule allows and the first bytes of its
// answer are a config drive (an ISO 9660 or VFAT image, or the base64
// text of a gzipped one). A refusal is a one-line reason in the body
// (what the fetch rule refused and the flag that allows it, or what the
// answer was not), naming the origin's host, never its answer.
func (p *driveProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "only GET", http.StatusMethodNotAllowed)
		return
	}
	t, _ := strings.CutPrefix(r.URL.Path, DrivePathPrefix)
	u, ok := p.lookup(t)
	if !ok {
		http.NotFound(w, r)
		return
	}
	host := "(unparsable URL)"
	if pu, err := url.Parse(u); err == nil {
		host = pu.Host
	}
	refuse := func(status int, why string, internal any) {
		p.log.Warn("site cache: config drive refused", "url", redactURL(u), "reason", why, "detail", internal)
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "site image cache: the config drive from "+host+" was not passed on: "+why, status)
	}
	ctx, cancel := context.WithTimeout(r.Context(), driveTimeout)
	defer cancel()
	resp, err := p.rule.Get(ctx, p.client, u)
	if err != nil {
		var rf *fetchrule.Refused
		if errors.As(err, &rf) {
			refuse(http.StatusForbidden, fetchrule.Words(err), err)
			return
		}
		refuse(http.StatusBadGateway, fetchrule.Words(err), err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		refuse(http.StatusBadGateway, "the origin did not answer with it (not 200 OK; the edge agent's log has its answer)", resp.Status)
		return
	}
	if resp.ContentLength > maxDriveBytes {
		refuse(http.StatusBadGateway, fmt.Sprintf("it is %d bytes, more than the 64 MiB limit allows", resp.ContentLength), nil)
		return
	}
	body := io.LimitReader(resp.Body, maxDriveBytes+1)
	head, err := driveHead(body)
	if err != nil {
		refuse(http.StatusBadGateway, err.Error(), nil)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	if _, err := w.Write(head); err != nil {
		return
	}
	// A longer answer than the limit is cut: the ramdisk sees a short
	// or failed transfer and refuses it.
	_, _ = io.Copy(w, body)
}

// driveHeadMax bounds what is read of a config drive before it is known
// to be one.
const driveHeadMax = 8 << 20

// isoMagicEnd is how many bytes of an image tell ISO 9660 ("CD001" at
// 0x8001) and, before it, a FAT boot sector.
const isoMagicEnd = 0x8006

// driveHead reads the first bytes of a config drive answer and returns
// them once they are a config drive: an ISO 9660 or VFAT image, or the
// base64 text of a gzipped one (as the ramdisk takes them).
func driveHead(body io.Reader) ([]byte, error) {
	rec := &recorder{r: body, max: driveHeadMax}
	first := make([]byte, 1)
	for {
		if _, err := io.ReadFull(rec, first); err != nil {
			return nil, errors.New("the answer is empty or cut short, not a config drive")
		}
		if !isSpace(first[0]) {
			break
		}
	}
	img := make([]byte, isoMagicEnd)
	copy(img, first)
	var n int
	if isBase64(first[0]) {
		dec := base64.NewDecoder(base64.StdEncoding, io.MultiReader(bytes.NewReader(first), &noSpace{r: rec}))
		zr, err := gzip.NewReader(dec)
		if err != nil {
			return nil, errors.New("the answer is text but not the base64 of gzip data: not a config drive (give an ISO 9660 or VFAT image, or its gzipped and base64-encoded text)")
		}
		n, err = io.ReadFull(zr, img)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errors.New("the answer's gzip data is damaged or too short: not a config drive")
		}
	} else {
		m, err := io.ReadFull(rec, img[1:])
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errors.New("the answer was cut short before it could be told a config drive")
		}
		n = m + 1
	}
	if rec.over {
		return nil, fmt.Errorf("its first %d MiB do not tell a config drive", driveHeadMax>>20)
	}
	if !looksLikeDrive(img[:n]) {
		return nil, errors.New("the answer is neither an ISO 9660 nor a VFAT image (nor the gzipped, base64-encoded text of one): not a config drive")
	}
	return rec.buf, nil
}

// looksLikeDrive tells an ISO 9660 volume or a FAT boot sector (as
// coordinator/configdrive does for an inline config drive).
func looksLikeDrive(img []byte) bool {
	if len(img) >= isoMagicEnd && string(img[0x8001:0x8006]) == "CD001" {
		return true
	}
	return len(img) >= 512 && img[510] == 0x55 && img[511] == 0xAA &&
		(string(img[0x36:0x39]) == "FAT" || string(img[0x52:0x57]) == "FAT32")
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }

func isBase64(b byte) bool {
	return 'A' <= b && b <= 'Z' || 'a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '+' || b == '/'
}

// recorder keeps what is read through it, up to max bytes.
type recorder struct {
	r    io.Reader
	buf  []byte
	max  int
	over bool
}

func (r *recorder) Read(p []byte) (int, error) {
	if len(r.buf) >= r.max {
		r.over = true
		return 0, io.EOF
	}
	if len(p) > r.max-len(r.buf) {
		p = p[:r.max-len(r.buf)]
	}
	n, err := r.r.Read(p)
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

// noSpace drops blanks (base64 text is often wrapped).
type noSpace struct{ r io.Reader }

func (s *noSpace) Read(p []byte) (int, error) {
	for {
		n, err := s.r.Read(p)
		k := 0
		for _, b := range p[:n] {
			if !isSpace(b) {
				p[k] = b
				k++
			}
		}
		if k > 0 || err != nil {
			return k, err
		}
	}
}

func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	p.User, p.RawQuery = nil, ""
	return p.String()
}

// driveArgs returns m with a write_image configdrive URL replaced by the
// site cache's pass-through URL for it (m itself is not changed).
func (sc *Cache) driveArgs(m *protocol.Message) *protocol.Message {
	v := protocol.WriteImageArgsOf(m.Step.Args).ConfigDrive
	lower := strings.ToLower(v)
	if sc.drives == nil || !(strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://")) || strings.HasPrefix(v, sc.driveBase) {
		return m
	}
	t, err := sc.drives.token(m.ID, v)
	if err != nil {
		return m
	}
	c := *m
	step := *m.Step
	step.Args = protocol.WithConfigDrive(m.Step.Args, sc.driveBase+t)
	c.Step = &step
	return &c
}
