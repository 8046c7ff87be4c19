package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/api"
	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
)

// storeFault makes every store write fail (or panic) once armed.
type storeFault struct {
	armed atomic.Bool
	panic bool
}

func (f *storeFault) Before(op string) error {
	if op != "write" || !f.armed.Load() {
		return nil
	}
	if f.panic {
		panic("injected: runtime error: invalid memory address or nil pointer dereference")
	}
	return fmt.Errorf("injected: write 000007.vlog: %w", syscall.ENOSPC)
}

type storeFailPublisher struct{}

func (storeFailPublisher) Publish(context.Context, string, []byte, bool) error { return nil }

type storeFailLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *storeFailLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *storeFailLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStoreFailureAnswers503: once a store write fails (an injected "no
// space left on device", or a panic in Badger), the API answers the
// request whose change was not stored and every write after it 503 in
// Ironic's error shape, at once, and reads too (which would show the
// change that was not stored); the engine logs one line with the cause
// and what to do, and closes Failed (serve then exits 3); a new engine on
// the same folder has every node acknowledged before.
func TestStoreFailureAnswers503(t *testing.T) {
	for _, tc := range []struct {
		name, cause string
		panic       bool
	}{
		{"error", "no space left on device", false},
		{"panic", "panic in Badger", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			logs := &storeFailLog{}
			f := &storeFault{panic: tc.panic}
			e, err := engine.New(engine.Config{DataDir: dir, Log: slog.New(slog.NewTextHandler(logs, nil)), TickInterval: time.Hour,
				StoreOptions: []store.Option{store.WithFaults(f)}})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Start(storeFailPublisher{}); err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: api.New(e, slog.New(slog.NewTextHandler(io.Discard, nil)), "")}
			go srv.Serve(ln)
			defer srv.Close()
			client := &http.Client{Timeout: 10 * time.Second}
			do := func(method, path, body string) (int, string) {
				t.Helper()
				req, _ := http.NewRequest(method, "http://"+ln.Addr().String()+path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v (want an answer, not a hang)", method, path, err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}

			if code, body := do("POST", "/v1/sites", `{"name": "rack1"}`); code != 201 {
				t.Fatalf("create site: %d %s", code, body)
			}
			for i := range 5 {
				if code, body := do("POST", "/v1/nodes", fmt.Sprintf(`{"driver": "fake", "name": "n%d", "conductor_group": "rack1"}`, i)); code != 201 {
					t.Fatalf("create n%d: %d %s", i, code, body)
				}
			}

			f.armed.Store(true)
			for i, req := range [][3]string{
				{"POST", "/v1/nodes", `{"driver": "fake", "name": "lost", "conductor_group": "rack1"}`},
				{"POST", "/v1/nodes", `{"driver": "fake", "name": "later", "conductor_group": "rack1"}`},
				{"PATCH", "/v1/nodes/n1", `[{"op": "add", "path": "/extra/k", "value": "v"}]`},
				{"PUT", "/v1/nodes/n2/states/provision", `{"target": "manage"}`},
				{"GET", "/v1/nodes", ""},
			} {
				code, body := do(req[0], req[1], req[2])
				if code != 503 {
					t.Fatalf("%s %s after the store failed: %d %s, want 503", req[0], req[1], code, body)
				}
				var outer struct {
					ErrorMessage string `json:"error_message"`
				}
				var inner struct {
					Faultcode, Faultstring string
				}
				if json.Unmarshal([]byte(body), &outer) != nil || json.Unmarshal([]byte(outer.ErrorMessage), &inner) != nil ||
					inner.Faultcode != "Server" || !strings.Contains(inner.Faultstring, tc.cause) {
					t.Fatalf("503 body %s: want Ironic's error shape with a faultstring naming %q", body, tc.cause)
				}
				if i == 0 {
					t.Logf("503: %s", inner.Faultstring)
				}
			}
			select {
			case <-e.Failed():
			default:
				t.Fatal("engine.Failed not closed after the store failed")
			}
			fatal := regexp.MustCompile(`(?m)^.*level=ERROR msg="store write failed: .*$`).FindAllString(logs.String(), -1)
			if len(fatal) != 1 {
				t.Fatalf("%d fatal lines, want one:\n%s", len(fatal), logs.String())
			}
			if !strings.Contains(fatal[0], tc.cause) || !strings.Contains(fatal[0], "start it again") {
				t.Errorf("fatal line does not say the cause (%q) and what to do: %s", tc.cause, fatal[0])
			}
			if strings.Contains(logs.String(), "goroutine ") {
				t.Errorf("a stack in the log:\n%s", logs.String())
			}
			srv.Close()
			e.Close()

			e2, err := engine.New(engine.Config{DataDir: dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), TickInterval: time.Hour})
			if err != nil {
				t.Fatalf("reopen after the failure: %v", err)
			}
			defer e2.Close()
			var names []string
			e2.Each(func(n *fsm.Node) bool { names = append(names, n.Name); return true })
			slices.Sort(names)
			if got := strings.Join(names, ","); got != "n0,n1,n2,n3,n4" {
				t.Fatalf("nodes after reopening: %s, want n0..n4 (and not the one whose write failed)", got)
			}
		})
	}
}
