package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestCPUProfilePerMember: a cluster member writes its profile to
// FILE.NAME, a single coordinator to FILE, and each is a profile once
// stopped.
func TestCPUProfilePerMember(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu.prof")
	t.Setenv(cpuProfileEnv, path)
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct{ member, want string }{{"c2", path + ".c2"}, {"", path}} {
		stop := cpuProfile(context.Background(), log, c.member)
		stop()
		st, err := os.Stat(c.want)
		if err != nil || st.Size() == 0 {
			t.Fatalf("member %q: no profile at %s: %v", c.member, c.want, err)
		}
		os.Remove(c.want)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
		t.Fatalf("other files written: %v", m)
	}
}
