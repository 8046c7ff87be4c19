package sitecache

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
)

// TestConfigDriveTokenLifetimeOnTheClock: a config drive's pass-through
// URL is served until driveTTL passed on the site cache's clock, and
// refused (404) after, with the origin still there.
func TestConfigDriveTokenLifetimeOnTheClock(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(testDrive(t)))
	}))
	t.Cleanup(origin.Close)
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	sc := New(Config{Site: "s1", Clock: fk, Opts: Options{Dir: t.TempDir(), Listen: "127.0.0.1:0", MaxBytes: 1 << 30, FetchAllow: loopback}})
	stop, err := sc.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	m := writeImageCmd(map[string]any{"image_source": origin.URL + "/img", "configdrive": origin.URL + "/cd"})
	u, _ := sc.ImageArgs(m).Step.Args["configdrive"].(string)
	if !strings.Contains(u, DrivePathPrefix) {
		t.Fatalf("configdrive %q, want the site cache's pass-through URL", u)
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
	fk.Advance(driveTTL)
	if got := status(); got != http.StatusOK {
		t.Fatalf("GET at the token's lifetime on the clock: %d, want 200", got)
	}
	fk.Advance(time.Nanosecond)
	if got := status(); got != http.StatusNotFound {
		t.Fatalf("GET after the token's lifetime on the clock: %d, want 404", got)
	}
	// The same command resent after that gets a new, live token, not the
	// dead one again.
	again, _ := sc.ImageArgs(writeImageCmd(map[string]any{"image_source": origin.URL + "/img", "configdrive": origin.URL + "/cd"})).Step.Args["configdrive"].(string)
	if again == u {
		t.Fatalf("the resent command got its expired config-drive URL again: %s", again)
	}
	u = again
	if got := status(); got != http.StatusOK {
		t.Fatalf("GET of the resent command's new token: %d, want 200", got)
	}
}
