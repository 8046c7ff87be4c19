package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/bmedge/bmedge/lib/freeport"
)

// webDriver is a tiny client of chromedriver's W3C WebDriver API, driving
// a headless Chromium on loopback.
type webDriver struct {
	base, session, version string
	cmd                    *exec.Cmd
	exited                 chan struct{} // closed when cmd has been waited for
}

func (d *webDriver) call(method, path string, body any) (json.RawMessage, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	url := d.base + path
	if d.session != "" {
		url = d.base + "/session/" + d.session + path
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("webdriver %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	var out struct {
		Value json.RawMessage `json:"value"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 {
		return nil, fmt.Errorf("webdriver %s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return out.Value, nil
}

func (d *webDriver) open(url string) error {
	_, err := d.call("POST", "/url", map[string]string{"url": url})
	return err
}

// js runs script in the page and returns its result (a string).
func (d *webDriver) js(script string, args ...any) (string, error) {
	if args == nil {
		args = []any{}
	}
	v, err := d.call("POST", "/execute/sync", map[string]any{"script": script, "args": args})
	if err != nil {
		return "", err
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return string(v), nil
	}
	return s, nil
}

func (d *webDriver) close() {
	if d.session != "" {
		req, _ := http.NewRequest("DELETE", d.base+"/session/"+d.session, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	if d.cmd != nil && d.cmd.Process != nil {
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// startChrome starts chromedriver on loopback and a headless Chromium
// session with a profile in tmp.
func startChrome(tmp string) (*webDriver, error) {
	chromium, err1 := exec.LookPath("chromium")
	driver, err2 := exec.LookPath("chromedriver")
	if err1 != nil || err2 != nil {
		return nil, errors.New("Debian's chromium and chromium-driver are not installed (scripts/install-test-deps.sh installs them)")
	}
	// chromedriver binds its port on 127.0.0.1 and [::1] and exits when
	// either is taken: the port is picked free on both, and a driver that
	// exits early all the same is started again on another port.
	d, err := startDriver(driver)
	for attempt := 2; err != nil && attempt <= 3; attempt++ {
		fmt.Fprintf(os.Stderr, "%v; starting it on another port\n", err)
		d, err = startDriver(driver)
	}
	if err != nil {
		return nil, err
	}
	profile := tmpDir(tmp, "chromium-profile")
	if err := os.MkdirAll(profile, 0o700); err != nil {
		d.close()
		return nil, err
	}
	v, err := d.call("POST", "/session", map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromium, "args": []string{"--headless", "--no-sandbox", "--disable-gpu",
			"--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir=" + profile, "--window-size=1280,800"}},
	}}})
	if err != nil {
		d.close()
		return nil, err
	}
	var sess struct {
		SessionID    string `json:"sessionId"`
		Capabilities struct {
			Version string `json:"browserVersion"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(v, &sess); err != nil || sess.SessionID == "" {
		d.close()
		return nil, fmt.Errorf("no webdriver session: %s", v)
	}
	d.session, d.version = sess.SessionID, "Chromium "+sess.Capabilities.Version
	return d, nil
}

// startDriver starts chromedriver on a port free on both loopbacks and
// waits until it answers; a driver that exits or stays silent for 15 s is
// an error.
func startDriver(driver string) (*webDriver, error) {
	port, err := freeport.LoopbackPort()
	if err != nil {
		return nil, err
	}
	d := &webDriver{base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	d.cmd = exec.Command(driver, fmt.Sprintf("--port=%d", port), "--allowed-ips=127.0.0.1")
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	d.exited = make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	for deadline := time.Now().Add(15 * time.Second); ; {
		select {
		case <-d.exited:
			return nil, fmt.Errorf("chromedriver on %s exited before answering", d.base)
		default:
		}
		resp, err := http.Get(d.base + "/status")
		if err == nil {
			resp.Body.Close()
			return d, nil
		}
		if time.Now().After(deadline) {
			d.close()
			return nil, fmt.Errorf("chromedriver did not answer on %s: %v", d.base, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
