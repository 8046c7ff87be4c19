package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeQuarantineFlag: serve --help teaches --quarantine-on (off by
// default); a value other than off, critical or warning is refused
// before anything opens, saying what to give.
func TestServeQuarantineFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	Main([]string{"serve", "--help"}, strings.NewReader(""), &out, &errOut)
	help := strings.Join(strings.Fields(out.String()+errOut.String()), " ")
	for _, w := range []string{"--quarantine-on off", "(default \"off\")", "critical or warning"} {
		if !strings.Contains(help, w) {
			t.Errorf("serve --help lacks %q:\n%s", w, help)
		}
	}
	data := filepath.Join(t.TempDir(), "data")
	errOut.Reset()
	code := Main([]string{"serve", "--data-dir", data, "--api-listen", "0.0.0.0:0", "--quarantine-on", "fatal"}, strings.NewReader(""), &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), `--quarantine-on "fatal": give off, critical or warning`) {
		t.Errorf("serve --quarantine-on fatal: exit %d, stderr %q; want refused naming the flag", code, errOut.String())
	}
	if _, err := os.Stat(data); err == nil {
		t.Error("serve --quarantine-on fatal: refused, but made the data folder")
	}
}
