package sitecache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/agent/clock"
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
	maxDrives     = 10000
)

type driveEntry struct {
	url     string
	cmd     string
	expires time.Time
}

// driveProxy is the site cache's config drive pass-through.
type driveProxy struct {
	client *http.Client
	clock  clock.Clock // the tokens' lifetime
	mu     sync.Mutex
	byTok  map[string]driveEntry
	byCmd  map[string]string
}

func newDriveProxy(client *http.Client, clk clock.Clock) *driveProxy {
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Minute}
	}
	return &driveProxy{client: client, clock: clock.Or(clk), byTok: map[string]driveEntry{}, byCmd: map[string]string{}}
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

// ServeHTTP streams the config drive of a token from its origin.
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
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		http.Error(w, "bad config drive URL", http.StatusBadGateway)
		return
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		http.Error(w, fmt.Sprintf("the site cache cannot fetch the config drive from %s: %v", redactURL(u), err), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		http.Error(w, fmt.Sprintf("the site cache cannot fetch the config drive from %s: the origin answered %s", redactURL(u), resp.Status), http.StatusBadGateway)
		return
	}
	if resp.ContentLength > maxDriveBytes {
		http.Error(w, fmt.Sprintf("the config drive at %s is %d bytes, more than the 64 MiB limit allows", redactURL(u), resp.ContentLength), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	// A longer answer than the limit is cut: the ramdisk sees a short
	// or failed transfer and refuses it.
	_, _ = io.Copy(w, io.LimitReader(resp.Body, maxDriveBytes+1))
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
	v, _ := m.Step.Args["configdrive"].(string)
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
	step.Args = maps.Clone(m.Step.Args)
	step.Args["configdrive"] = sc.driveBase + t
	c.Step = &step
	return &c
}
