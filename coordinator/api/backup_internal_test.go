package api

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/engine"
)

// smallBufListener gives each accepted connection a small send buffer, so
// that a client that reads nothing stops the server's writes after a few
// KiB instead of after the kernel's megabytes.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestBackupStalledClientReleasesSlot (issue 30): a backup client that
// reads nothing is cut off at the write deadline (here a short one) and
// the one backup slot is free again: the next backup, read at once, is
// whole. A client that keeps reading a trickle is cut off at the whole
// backup's deadline.
func TestBackupStalledClientReleasesSlot(t *testing.T) {
	stall, max := backupStall.get(), backupMax.get()
	t.Cleanup(func() { backupStall.set(stall); backupMax.set(max) })
	backupStall.set(time.Second)
	backupMax.set(time.Hour)

	e, err := engine.New(engine.Config{DataDir: t.TempDir(), Log: slog.New(slog.DiscardHandler), TickInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(nopPublisher{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: New(e, slog.New(slog.DiscardHandler), "")}
	go srv.Serve(smallBufListener{ln})
	t.Cleanup(func() { srv.Close() })
	base := "http://" + ln.Addr().String()
	post := func(path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// About 2 MiB of data that does not compress: far more than the
	// connection's buffers.
	if code, b := post("/v1/sites", `{"name":"s1"}`); code != 201 && code != 200 {
		t.Fatalf("add a site: %d %.200s", code, b)
	}
	for i := 0; i < 48; i++ {
		r := make([]byte, 20<<10)
		_, _ = rand.Read(r)
		if code, b := post("/v1/nodes", fmt.Sprintf(`{"name":"n%d","driver":"fake-hardware","conductor_group":"s1","extra":{"pad":"%s"}}`, i, hex.EncodeToString(r))); code != 201 {
			t.Fatalf("create node %d: %d %.200s", i, code, b)
		}
	}

	// The stalled client: sends its request and reads nothing.
	stalled, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	_ = stalled.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := io.WriteString(stalled, "POST /v1/backup HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Its backup started (the status line came; it reads nothing more).
	_ = stalled.SetReadDeadline(time.Now().Add(30 * time.Second))
	status := make([]byte, len("HTTP/1.1 200"))
	if _, err := io.ReadFull(stalled, status); err != nil || string(status) != "HTTP/1.1 200" {
		t.Fatalf("the stalled client's backup did not start: %q %v", status, err)
	}
	started := time.Now()
	// While it holds the slot, another backup is refused (409)...
	if code, _ := post("/v1/backup", ""); code != http.StatusConflict {
		if time.Since(started) < backupStall.get() {
			t.Fatalf("a backup while the stalled one runs: %d, want 409", code)
		}
		t.Logf("the machine was too slow to see the stalled backup hold the slot (%s)", time.Since(started))
	}
	deadline := time.Now().Add(30 * time.Second)
	// ...until its write deadline cut it off: then a backup read at once
	// runs, whole.
	for {
		req, _ := http.NewRequest("POST", base+"/v1/backup", nil)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, rerr := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			if rerr != nil || resp.Trailer.Get(BackupErrorTrailer) != "" || resp.Trailer.Get(BackupNodesTrailer) != "48" {
				t.Fatalf("the backup after the stalled one: %d bytes, %v, trailers %v", n, rerr, resp.Trailer)
			}
			break
		}
		if resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("a backup after the stalled client: %d, want 200 once the stall deadline cut it off", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A trickle reader (512 bytes every 20 ms), with a whole-backup
	// deadline of a second: cut off there, not after an hour, and the
	// slot is free again.
	backupStall.set(time.Hour)
	backupMax.set(time.Second)
	trickle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer trickle.Close()
	_ = trickle.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := io.WriteString(trickle, "POST /v1/backup HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var got []byte
	buf := make([]byte, 512)
	for time.Since(start) < 30*time.Second {
		_ = trickle.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, rerr := trickle.Read(buf)
		got = append(got, buf[:n]...)
		if rerr != nil || strings.Contains(string(got), BackupErrorTrailer+":") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if time.Since(start) >= 30*time.Second {
		t.Fatalf("a trickle reader was not cut off at the whole backup's deadline (%d bytes read)", len(got))
	}
	if strings.Contains(string(got), BackupNodesTrailer+": 48") {
		t.Fatalf("a trickle reader got the whole backup")
	}
	backupMax.set(time.Hour)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, _ := post("/v1/backup", "")
		if code == 200 {
			break
		}
		if code != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("a backup after the trickle reader was cut off: %d, want 200", code)
		}
	}
}
