// Package webdriver is a small client of chromedriver's W3C WebDriver
// HTTP API: it starts chromedriver on loopback and one session of
// Debian's headless Chromium, for the web view's browser tests and
// `make bench-ui`.
package webdriver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"time"

	"github.com/bmedge/bmedge/lib/freeport"
)

// ErrNotInstalled is Start's error when chromium or chromedriver is not
// on PATH.
var ErrNotInstalled = errors.New("Debian's chromium and chromium-driver are not installed (scripts/install-test-deps.sh installs them)")

// Options say how Start starts the browser.
type Options struct {
	// ProfileDir is Chromium's profile folder (it must exist).
	ProfileDir string
	// Args are Chromium's arguments beyond the headless defaults (such
	// as --hide-scrollbars).
	Args []string
	// Output receives chromedriver's own output; nil discards it.
	Output io.Writer
	// Logf, if set, hears of a chromedriver started again on another
	// port.
	Logf func(format string, args ...any)
}

// Session is a running chromedriver and its browser session.
type Session struct {
	// Version is the browser's name and version ("Chromium 1…").
	Version string
	base    string
	id      string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd has been waited for
}

// startAttempts is how many ports Start tries.
const startAttempts = 3

// Start starts chromedriver on a loopback port and a headless Chromium
// session. chromedriver binds its port on 127.0.0.1 and [::1] and exits
// when either is taken, so the port is picked free on both, and a driver
// that exits before answering all the same (another process took the
// port meanwhile) is started again on another port, up to three times.
func Start(o Options) (*Session, error) {
	chromium, err1 := exec.LookPath("chromium")
	driver, err2 := exec.LookPath("chromedriver")
	if err1 != nil || err2 != nil {
		return nil, ErrNotInstalled
	}
	s, err := startDriver(driver, o.Output)
	for attempt := 2; err != nil && attempt <= startAttempts; attempt++ {
		if o.Logf != nil {
			o.Logf("%v; starting it on another port", err)
		}
		s, err = startDriver(driver, o.Output)
	}
	if err != nil {
		return nil, err
	}
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + o.ProfileDir, "--window-size=1280,800"}, o.Args...)
	v, code, raw, err := s.Do("POST", "/session", map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName":        "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromium, "args": args},
	}}})
	if err == nil && code != 200 {
		err = fmt.Errorf("no webdriver session: %d %s", code, raw)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	var sess struct {
		SessionID    string `json:"sessionId"`
		Capabilities struct {
			Version string `json:"browserVersion"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(v, &sess); err != nil || sess.SessionID == "" {
		s.Close()
		return nil, fmt.Errorf("no webdriver session: %s", v)
	}
	s.id, s.Version = sess.SessionID, "Chromium "+sess.Capabilities.Version
	return s, nil
}

// startDriver starts chromedriver on a port free on both loopbacks and
// waits until it answers; a driver that exits or stays silent for 15 s is
// an error.
func startDriver(driver string, out io.Writer) (*Session, error) {
	port, err := freeport.LoopbackPort()
	if err != nil {
		return nil, err
	}
	s := &Session{base: fmt.Sprintf("http://127.0.0.1:%d", port), exited: make(chan struct{})}
	s.cmd = exec.Command(driver, fmt.Sprintf("--port=%d", port), "--allowed-ips=127.0.0.1")
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := http.Get(s.base + "/status")
		if err == nil {
			resp.Body.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("chromedriver did not answer on %s: %v", s.base, err)
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("chromedriver on %s exited before answering (%s)", s.base, s.cmd.ProcessState)
		case <-tk.C:
		}
	}
}

// Do sends one command: path is under the session once it has one
// ("/url", "/execute/sync", …). It returns the answer's value, its HTTP
// status and its body; err is for an answer that did not come or is not
// WebDriver's JSON.
func (s *Session) Do(method, path string, body any) (value json.RawMessage, status int, raw []byte, err error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	url := s.base + path
	if s.id != "" {
		url = s.base + "/session/" + s.id + path
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return nil, 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("webdriver %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ = io.ReadAll(resp.Body)
	var out struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, resp.StatusCode, raw, fmt.Errorf("webdriver %s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return out.Value, resp.StatusCode, raw, nil
}

// Close ends the browser session and stops chromedriver.
func (s *Session) Close() {
	if s.id != "" {
		req, _ := http.NewRequest("DELETE", s.base+"/session/"+s.id, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		s.id = ""
	}
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}
