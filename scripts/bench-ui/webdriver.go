package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"time"
)

// webDriver is a tiny client of chromedriver's W3C WebDriver API, driving
// a headless Chromium on loopback.
type webDriver struct {
	base, session, version string
	cmd                    *exec.Cmd
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
		_ = d.cmd.Wait()
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	d := &webDriver{base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	d.cmd = exec.Command(driver, fmt.Sprintf("--port=%d", port), "--allowed-ips=127.0.0.1")
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := http.Get(d.base + "/status")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			d.close()
			return nil, fmt.Errorf("chromedriver did not answer on %s: %v", d.base, err)
		}
		time.Sleep(50 * time.Millisecond)
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
