package api_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocsCiteOnlyRepositoryFiles: every file or folder of this
// repository that a document in docs/ names exists, so that an operator
// who follows a reference finds it. Checked: relative Markdown link
// targets; paths under a top-level folder of the repository (agent/,
// coordinator/, docs/, drivers/, lib/, protocol/, ramdisk/, scripts/), a
// trailing .Symbol allowed after a package folder; bare file names
// ending in .go, .md, .sh or .py (some file of that name must exist); and
// the state machine's scenario files (NN_name.txt). Paths under build/
// (made by make) and an operator's own files (steps.json, rack7.json)
// are not the repository's and are not checked.
func TestDocsCiteOnlyRepositoryFiles(t *testing.T) {
	root := filepath.Join("..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md found from %s: %v", root, err)
	}
	tops := map[string]bool{}
	for _, d := range []string{"agent", "coordinator", "docs", "drivers", "lib", "protocol", "ramdisk", "scripts"} {
		if st, err := os.Stat(filepath.Join(root, d)); err != nil || !st.IsDir() {
			t.Fatalf("top-level folder %s missing: %v", d, err)
		}
		tops[d] = true
	}
	// Every file name in the repository (work tree, without build
	// output), for bare names.
	names := map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (d.Name() == ".git" || d.Name() == "build" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		names[d.Name()] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		return err == nil
	}

	var (
		link     = regexp.MustCompile(`\]\(([^)\s#]+)`)
		repoPath = regexp.MustCompile(`(^|[^A-Za-z0-9_./:-])((?:agent|coordinator|docs|drivers|lib|protocol|ramdisk|scripts)/[A-Za-z0-9_./@-]*)`)
		bare     = regexp.MustCompile(`(^|[^A-Za-z0-9_./*-])([A-Za-z][A-Za-z0-9_.-]*\.(?:go|md|sh|py))\b`)
		scenario = regexp.MustCompile(`\b(\d\d_[a-z0-9_]+\.txt)\b`)
	)
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		name := "docs/" + filepath.Base(doc)
		for i, line := range strings.Split(string(b), "\n") {
			where := func(ref, why string) {
				t.Errorf("%s:%d cites %q, %s", name, i+1, ref, why)
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				if !exists(filepath.ToSlash(filepath.Join("docs", target))) {
					where(target, "a link target that is not in the repository")
				}
			}
			for _, m := range repoPath.FindAllStringSubmatch(line, -1) {
				p := strings.TrimRight(m[2], ".")
				if strings.ContainsAny(p, "*") || !tops[strings.SplitN(p, "/", 2)[0]] || p == strings.SplitN(p, "/", 2)[0]+"/" {
					continue
				}
				checked++
				if exists(p) {
					continue
				}
				// A package's symbol: ramdisk/boot.SplitCmdline.
				if dir, _, ok := cutLast(p, "."); ok && exists(dir) && !strings.Contains(p[len(dir):], "/") {
					if st, err := os.Stat(filepath.Join(root, dir)); err == nil && st.IsDir() {
						continue
					}
				}
				where(p, "a path that is not in the repository")
			}
			for _, ix := range bare.FindAllStringSubmatchIndex(line, -1) {
				name, end := line[ix[4]:ix[5]], ix[5]
				if end+1 < len(line) && line[end] == '.' && unicode.IsLetter(rune(line[end+1])) {
					continue // a dotted name that goes on is no file name: dracut's rd.md.uuid
				}
				checked++
				if !names[name] {
					where(name, "a file name that no file of the repository has")
				}
			}
			for _, m := range scenario.FindAllStringSubmatch(line, -1) {
				checked++
				if !exists("coordinator/fsm/testdata/scenarios/" + m[1]) {
					where(m[1], "a scenario file that is not in coordinator/fsm/testdata/scenarios")
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d references checked; the patterns no longer match the docs", checked)
	}
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}
