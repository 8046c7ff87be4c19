package backups

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A restore never mixes with what a data folder holds, and names a
// running coordinator's database when it finds one.
func TestEmptyOrAbsent(t *testing.T) {
	dir := t.TempDir()
	if err := emptyOrAbsent(filepath.Join(dir, "new")); err != nil {
		t.Fatalf("absent folder: %v", err)
	}
	if err := emptyOrAbsent(dir); err != nil {
		t.Fatalf("empty folder: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, DBFolder), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DBFolder, "MANIFEST"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := emptyOrAbsent(dir)
	if err == nil || !strings.Contains(err.Error(), "coordinator's database") {
		t.Fatalf("folder with a database: %v", err)
	}
	f := filepath.Join(dir, "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := emptyOrAbsent(f); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Fatalf("a file: %v", err)
	}
}

// Restore checks its key before it writes anything.
func TestRestoreWithoutKey(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "data")
	if _, err := Restore(filepath.Join(dir, "backup"), target, filepath.Join(dir, "no.key"), nil); err == nil {
		t.Fatal("restored without a key")
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the data folder was made: %v", err)
	}
}
