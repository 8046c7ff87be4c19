package recorded

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every fixture loads, has a service root, one system, and a SOURCE.md
// that names its repository, commit and licence; the whole testdata
// stays small.
func TestFixtures(t *testing.T) {
	names := Fixtures()
	if len(names) < 5 {
		t.Fatalf("fixtures %v: want at least 5", names)
	}
	var total int64
	for _, n := range names {
		docs, err := Load(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		col := docs[root+"/Systems"]
		if ms, _ := col["Members"].([]any); len(ms) != 1 {
			t.Errorf("%s: %d systems", n, len(ms))
		}
		src, err := os.ReadFile(filepath.Join(Dir(n), "SOURCE.md"))
		if err != nil {
			t.Errorf("%s: %v", n, err)
		}
		for _, want := range []string{"Repository:", "Commit:", "Licence:"} {
			if !strings.Contains(string(src), want) {
				t.Errorf("%s/SOURCE.md lacks %q", n, want)
			}
		}
		if _, ok := Profiles[n]; !ok {
			t.Errorf("%s has no entry in Profiles", n)
		}
		_ = filepath.Walk(Dir(n), func(_ string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				total += fi.Size()
			}
			return nil
		})
	}
	if total > 2<<20 {
		t.Errorf("the fixtures hold %d bytes; keep them well under 5 MB", total)
	}
}
