package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeFastTrackFlags: serve --help teaches --fast-track and
// --fast-track-timeout with Ironic's names and default; a timeout under
// 1 s is refused before anything opens, saying what to give.
func TestServeFastTrackFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	Main([]string{"serve", "--help"}, strings.NewReader(""), &out, &errOut)
	help := strings.Join(strings.Fields(out.String()+errOut.String()), " ")
	for _, w := range []string{"--fast-track ", "[deploy]fast_track", "--fast-track-timeout DURATION", "(default 5m0s)", "driver_info fast_track"} {
		if !strings.Contains(help, w) {
			t.Errorf("serve --help lacks %q:\n%s", w, help)
		}
	}
	data := filepath.Join(t.TempDir(), "data")
	out.Reset()
	errOut.Reset()
	// The API on 0.0.0.0 without authentication is refused too, later:
	// without the timeout's check serve ends there instead of serving.
	code := Main([]string{"serve", "--data-dir", data, "--api-listen", "0.0.0.0:0", "--fast-track", "--fast-track-timeout", "0s"}, strings.NewReader(""), &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "--fast-track-timeout 0s: give at least 1s") {
		t.Errorf("serve --fast-track-timeout 0s: exit %d, stderr %q; want refused naming the flag", code, errOut.String())
	}
	if _, err := os.Stat(data); err == nil {
		t.Error("serve --fast-track-timeout 0s: refused, but made the data folder")
	}
}
