package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/bmedge/bmedge/lib/webdriver"
)

// webDriver is the bench's side of a WebDriver session (lib/webdriver):
// a refusal is an error.
type webDriver struct {
	s       *webdriver.Session
	version string
}

func (d *webDriver) call(method, path string, body any) (json.RawMessage, error) {
	v, code, b, err := d.s.Do(method, path, body)
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("webdriver %s %s: %d %s", method, path, code, b)
	}
	return v, nil
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

func (d *webDriver) close() { d.s.Close() }

// startChrome starts chromedriver on loopback and a headless Chromium
// session with a profile in tmp.
func startChrome(tmp string) (*webDriver, error) {
	profile := tmpDir(tmp, "chromium-profile")
	if err := os.MkdirAll(profile, 0o700); err != nil {
		return nil, err
	}
	s, err := webdriver.Start(webdriver.Options{ProfileDir: profile, Logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }})
	if err != nil {
		return nil, err
	}
	return &webDriver{s: s, version: s.Version}, nil
}
