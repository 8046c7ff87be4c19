package boot

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/ratelog"
)

// lockedBuffer is a log sink that the server's goroutines share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestMediaUnknownTokenLogBounded: 2000 requests for unknown boot
// parameters from a plain HTTP client (over keep-alive connections, as a
// stranger on the site network would send them) are all answered 404 and
// write at most one log line per ratelog interval, with the count of
// those left out; never one line per request.
func TestMediaUnknownTokenLogBounded(t *testing.T) {
	iso := filepath.Join(t.TempDir(), "ramdisk.iso")
	if err := os.WriteFile(iso, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	m, err := newMediaServer(RamdiskOptions{ISO: iso, Listen: "127.0.0.1:0"}, log)
	if err != nil {
		t.Fatal(err)
	}
	go m.serve()
	defer m.close()
	host, _, _ := net.SplitHostPort(m.ln.Addr().String())
	if host != "127.0.0.1" {
		t.Fatalf("media server listens on %s", m.ln.Addr())
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	const n = 2000
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				resp, err := hc.Get(fmt.Sprintf("%s/boot/%032x/params.img", m.base, i))
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					errs <- fmt.Errorf("unknown token answered %d", resp.StatusCode)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	out := logs.String()
	lines := strings.Count(out, "\n")
	// One kind: one line per interval that began during the flood.
	bound := int(elapsed/ratelog.DefaultInterval) + 1
	t.Logf("%d unknown-token requests in %s wrote %d log lines (bound %d, %d bytes)", n, elapsed.Round(time.Millisecond), lines, bound, len(out))
	if lines > bound {
		t.Fatalf("%d requests for unknown boot parameters wrote %d log lines; want at most %d (one per %s):\n%.2000s", n, lines, bound, ratelog.DefaultInterval, out)
	}
	if lines == 0 || !strings.Contains(out, "unknown or ended boot parameters") {
		t.Fatalf("the refusals were not logged at all:\n%s", out)
	}
	if strings.Contains(out, fmt.Sprintf("%032x", 1)) {
		t.Fatal("a requested name reached the log")
	}
	if got := m.refused.Suppressed("unknown params"); lines == 1 && got != n-1 {
		t.Errorf("one line written and %d counted, for %d refusals", got, n)
	}
}
