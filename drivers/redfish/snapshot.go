package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/bmedge/bmedge/drivers"
)

// A manage is Validate, then the firmware and the BIOS readings (as
// Ironic's verify caches them), three operations in a row. Against a
// BMC that takes seconds per request, their sequential reads are what
// the operator waits for; so Validate reads both ahead, in parallel with
// its own reads, and the readings that follow within snapshotTTL take
// what it read, once each. Any operation that changes the BMC drops them.

const snapshotTTL = 30 * time.Second

type snapshot struct {
	at       time.Time
	fw       []drivers.FirmwareComponent
	fwWarn   []string
	fwOK     bool
	bios     []drivers.BIOSSetting
	biosWarn []string
	biosOK   bool
	// biosErr is a BIOS reading's definite failure (the BMC has no Bios,
	// a 404): the reading that follows gives it without asking again.
	biosErr error
}

// definite: an answer that asking again at once will not change (not a
// 5xx, a connection error, nor a refused login or session).
func definite(err error) bool {
	st := statusOf(err)
	return !retryable(err) && st != http.StatusUnauthorized && st != http.StatusForbidden &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

func (s *snapshot) fresh() bool { return s != nil && time.Since(s.at) < snapshotTTL }

// lockWrite is lock for an operation that may change the BMC: what
// Validate read ahead is dropped.
func (b *BMC) lockWrite(ctx context.Context) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	b.snap = nil
	return nil
}

// readAhead reads the firmware and the BIOS settings for the snapshot;
// a reading that fails is left to be done again when asked for.
func (b *BMC) readAhead(c *gofish.APIClient) *snapshot {
	s := &snapshot{}
	parallel(
		func() {
			fw, _, w, err := b.components(c)
			s.fw, s.fwWarn, s.fwOK = fw, w, err == nil
		},
		func() {
			bios, w, err := b.biosReading(c)
			s.bios, s.biosWarn, s.biosOK = bios, w, err == nil
			if err != nil && definite(err) {
				s.biosErr = err
			}
		},
	)
	s.at = time.Now()
	return s
}

// takeFirmware returns the snapshot's firmware reading, once.
func (b *BMC) takeFirmware() ([]drivers.FirmwareComponent, []string, bool) {
	if !b.snap.fresh() || !b.snap.fwOK {
		return nil, nil, false
	}
	b.snap.fwOK = false
	return b.snap.fw, b.snap.fwWarn, true
}

// takeBIOS returns the snapshot's BIOS reading, or its definite
// failure, once.
func (b *BMC) takeBIOS() ([]drivers.BIOSSetting, []string, error, bool) {
	if !b.snap.fresh() {
		return nil, nil, nil, false
	}
	if err := b.snap.biosErr; err != nil {
		b.snap.biosErr = nil
		return nil, nil, b.failure("read BIOS settings", err, 1, 0, nil), true
	}
	if !b.snap.biosOK {
		return nil, nil, nil, false
	}
	b.snap.biosOK = false
	return b.snap.bios, b.snap.biosWarn, nil, true
}

// sessionLogin posts a session login to path (the spec's
// /redfish/v1/SessionService/Sessions, before the service root says
// otherwise) and returns the session's token and URI. A refusal is a
// *schemas.Error, as gofish's, so that it is explained the same way.
func (b *BMC) sessionLogin(ctx context.Context, path string) (token, uri string, err error) {
	body, _ := json.Marshal(map[string]string{"UserName": b.cfg.username, "Password": b.cfg.password})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.cfg.endpoint+path, bytes.NewReader(body))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := b.http.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		return "", "", schemas.ConstructError(resp.StatusCode, data)
	}
	token = resp.Header.Get("X-Auth-Token")
	uri = resp.Header.Get("Location")
	if u, perr := url.Parse(uri); perr == nil && u.Path != "" {
		uri = u.RequestURI()
	}
	if uri == "" {
		var doc link
		_ = json.Unmarshal(data, &doc)
		uri = doc.ID
	}
	if token == "" {
		return "", "", fmt.Errorf("the BMC took the session login (POST %s, HTTP %d) but gave no X-Auth-Token", path, resp.StatusCode)
	}
	return token, uri, nil
}

// fetchRoot reads the service root, which the transport keeps.
func (b *BMC) fetchRoot(ctx context.Context) (*serviceRootLinks, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.cfg.endpoint+rootPath+"/", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, schemas.ConstructError(resp.StatusCode, data)
	}
	var root serviceRootLinks
	_ = json.Unmarshal(data, &root)
	return &root, nil
}

type serviceRootLinks struct {
	Links struct {
		Sessions link `json:"Sessions"`
	} `json:"Links"`
}

// basicProbe is a GET made with Basic authentication beside a session
// login.
type basicProbe struct {
	uri    string
	status int
	body   []byte
	err    error // a *schemas.Error for an answer other than 200
}

func (p *basicProbe) refused() bool {
	st := statusOf(p.err)
	return st == http.StatusUnauthorized || st == http.StatusForbidden
}

// seed gives the probe's answer to the operation's read cache, if both
// are there: the read it stands for is then not made again.
func (p *basicProbe) seed(ctx context.Context) {
	if p == nil || p.status != http.StatusOK {
		return
	}
	rc, _ := ctx.Value(readCacheKey{}).(*readCache)
	if rc == nil {
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.docs[p.uri] == nil {
		e := &cacheEntry{done: make(chan struct{}), body: p.body}
		close(e.done)
		rc.docs[p.uri] = e
	}
}

// probeBasic GETs path with Basic authentication.
func (b *BMC) probeBasic(ctx context.Context, path string) *basicProbe {
	p := &basicProbe{uri: path}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.cfg.endpoint+path, nil)
	if err != nil {
		p.err = err
		return p
	}
	req.SetBasicAuth(b.cfg.username, b.cfg.password)
	req.Header.Set("Accept", "application/json")
	resp, err := b.http.Do(req)
	if err != nil {
		p.err = err
		return p
	}
	defer resp.Body.Close()
	p.status = resp.StatusCode
	p.body, _ = io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		p.err = &reqError{"GET", path, schemas.ConstructError(resp.StatusCode, p.body)}
	}
	return p
}
