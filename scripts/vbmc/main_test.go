package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// buffer is a bytes.Buffer that run may write while the test reads.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

var ready = regexp.MustCompile(`(?m)^vbmc: serving (http://127\.0\.0\.1:\d+) systems: (\S+)$`)

// TestRunServesSystems runs the program's main logic with two in-memory
// systems on a free port: the ready line names the URL and both system
// IDs; the service root is public (as Redfish has it); the systems
// collection and each system answer with Basic credentials and 401
// without them or with a wrong password; cancelling the context stops it
// and closes the port.
func TestRunServesSystems(t *testing.T) {
	t.Setenv("VBMC_PASSWORD", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--systems", "2", "--listen", "127.0.0.1:0", "--username", "root", "--password", "calvin", "--log-level", "warn"}, &out)
	}()
	var m []string
	deadline := time.Now().Add(10 * time.Second)
	for m = ready.FindStringSubmatch(out.String()); m == nil; m = ready.FindStringSubmatch(out.String()) {
		select {
		case err := <-done:
			t.Fatalf("run returned before it was ready: %v; output:\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready line within 10 s; output:\n%s", out.String())
		}
	}
	base, ids := m[1], strings.Split(m[2], ",")
	if len(ids) != 2 || ids[0] != "system-1" || ids[1] != "system-2" {
		t.Fatalf("system IDs %q; want system-1,system-2", m[2])
	}

	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(path, user, pass string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest("GET", base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var doc map[string]any
		_ = json.Unmarshal(b, &doc)
		return resp.StatusCode, doc
	}

	if code, doc := get("/redfish/v1", "root", "calvin"); code != 200 || doc["Systems"] == nil {
		t.Fatalf("service root with credentials: %d %v", code, doc)
	}
	if code, _ := get("/redfish/v1", "", ""); code != 200 {
		t.Fatalf("service root without credentials: %d; Redfish serves it to anyone", code)
	}
	code, doc := get("/redfish/v1/Systems", "root", "calvin")
	if code != 200 || doc["Members@odata.count"] != float64(2) {
		t.Fatalf("systems collection: %d %v; want 2 members", code, doc)
	}
	for _, p := range []string{"/redfish/v1/Systems", "/redfish/v1/Systems/" + ids[0], "/redfish/v1/Systems/" + ids[1]} {
		if code, _ := get(p, "", ""); code != 401 {
			t.Errorf("GET %s without credentials: %d; want 401", p, code)
		}
		if code, _ := get(p, "root", "wrong"); code != 401 {
			t.Errorf("GET %s with a wrong password: %d; want 401", p, code)
		}
	}
	for _, id := range ids {
		code, doc := get("/redfish/v1/Systems/"+id, "root", "calvin")
		if code != 200 || doc["Id"] != id || doc["PowerState"] != "Off" {
			t.Errorf("system %s: %d Id %v PowerState %v; want 200, its Id, Off", id, code, doc["Id"], doc["PowerState"])
		}
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10 s of its context's end")
	}
	if _, err := hc.Get(base + "/redfish/v1"); err == nil {
		t.Error("the BMC still answers after run returned")
	}
}

// TestRunRefuses: no password, flags of QEMU mode without it, --help.
func TestRunRefuses(t *testing.T) {
	t.Setenv("VBMC_PASSWORD", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "127.0.0.1:0"}, "no password"},
		{[]string{"--password", "x", "--listen", "127.0.0.1:0", "--dir", "d"}, "QEMU mode"},
		{[]string{"--password", "x", "--qemu-disk", "d.img", "--systems", "3"}, "one VM"},
		{[]string{"--password", "x", "--boot-mode", "BIOS"}, "UEFI or Legacy"},
		{[]string{"--password", "x", "--tls-cert", "c.pem"}, "go together"},
	} {
		var out buffer
		err := run(context.Background(), tc.args, &out)
		if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %q: %v; want a usage error saying %q", tc.args, err, tc.want)
		}
	}
	var out buffer
	if err := run(context.Background(), []string{"--help"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, w := range []string{"VBMC_PASSWORD", "redfish_address", "-qemu-disk", "-power-delay", "vbmc: serving"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("--help does not mention %q", w)
		}
	}
}
