package boot

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
)

// TestParamsImageLifetimeOnTheClock: the media server the boot part
// starts serves a boot's parameters image until paramsTTL passed on the
// part's clock, and refuses it (404) after.
func TestParamsImageLifetimeOnTheClock(t *testing.T) {
	iso := filepath.Join(t.TempDir(), "ramdisk.iso")
	if err := os.WriteFile(iso, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), Clock: fk,
		Ramdisk: RamdiskOptions{ISO: iso, Listen: "127.0.0.1:0", BrokerURL: "mqtt://127.0.0.1:1883"}})
	stop, err := p.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	u, _, err := p.media.addParams("n1", "bm.node=n1")
	if err != nil {
		t.Fatal(err)
	}
	status := func() int {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	fk.Advance(paramsTTL)
	if got := status(); got != http.StatusOK {
		t.Fatalf("GET at paramsTTL on the clock: %d, want 200", got)
	}
	fk.Advance(time.Nanosecond)
	if got := status(); got != http.StatusNotFound {
		t.Fatalf("GET after paramsTTL on the clock: %d, want 404", got)
	}
}
