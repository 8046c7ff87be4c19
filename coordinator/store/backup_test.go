package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// backupOf fills a database with keys (values large enough for several
// parts, a deleted key, a flush key) and returns its backup.
func backupOf(t *testing.T) (want map[string]string, file []byte) {
	t.Helper()
	s := openTest(t, t.TempDir())
	defer s.Close()
	want = map[string]string{}
	var b Batch
	for i := range 40 {
		k := fmt.Sprintf("%s%03d", NodePrefix, i)
		v := strings.Repeat(fmt.Sprintf("node %d secret-%d;", i, i), 400)
		b.Set(k, []byte(v))
		want[k] = v
	}
	b.Set(SitePrefix+"gone", []byte("x"))
	if err := s.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	var d Batch
	d.Delete(SitePrefix + "gone")
	if err := s.Commit(context.Background(), &d); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	info, err := s.Backup(context.Background(), &buf, testKey, map[string][]byte{"secret": []byte("the coordinator's secret")})
	if err != nil {
		t.Fatal(err)
	}
	if info.Keys != 40 || info.Nodes != 40 || len(info.Files) != 1 {
		t.Fatalf("backup info %+v, want 40 keys, 40 nodes, 1 file", info)
	}
	return want, buf.Bytes()
}

// TestBackupRoundTrip restores a backup into a new database: the same
// keys and values, the deleted key absent, the files back; the file
// holds none of the values in the clear.
func TestBackupRoundTrip(t *testing.T) {
	want, file := backupOf(t)
	if bytes.Contains(file, []byte("secret-1;")) || bytes.Contains(file, []byte("coordinator's secret")) {
		t.Fatal("the backup holds a value in the clear")
	}
	if n, err := CheckBackupFrame(bytes.NewReader(file)); err != nil || n != int64(len(file)) {
		t.Fatalf("CheckBackupFrame: %d, %v; want %d, nil", n, err, len(file))
	}
	dir := filepath.Join(t.TempDir(), "db")
	info, files, err := RestoreBackup(bytes.NewReader(file), testKey, dir, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if info.Keys != len(want) || string(files["secret"]) != "the coordinator's secret" {
		t.Fatalf("restore: %+v, files %q", info, files)
	}
	s := openTest(t, dir)
	defer s.Close()
	got := map[string]string{}
	if err := s.Scan("", func(k string, v []byte) error { got[k] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("restored %d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("restored %s differs", k)
		}
	}
	if _, _, err := RestoreBackup(bytes.NewReader(file), testKey, dir, slog.Default()); err == nil || !strings.Contains(err.Error(), "already holds a database") {
		t.Fatalf("restore onto a database: %v", err)
	}
}

// TestBackupRefusals: a backup cut anywhere, with any byte changed, with
// bytes after its end, or opened with another key is refused, each with
// its own error; CheckBackupFrame (no key) sees the cuts too.
func TestBackupRefusals(t *testing.T) {
	_, file := backupOf(t)
	if len(file) < 3*backupPart {
		t.Fatalf("the backup has %d bytes; the test wants several parts", len(file))
	}
	verify := func(b []byte, key []byte) error {
		_, err := VerifyBackup(bytes.NewReader(b), key)
		return err
	}
	if err := verify(file, testKey); err != nil {
		t.Fatal(err)
	}
	// Cut at the header, in a part's length, in a part, at the end of
	// a part (before the last), and one byte short.
	partEnd := backupHeader + 4 + backupPart + gcmOverhead
	for _, n := range []int{10, backupHeader - 1, backupHeader + 2, backupHeader + 1000, partEnd, partEnd + 4 + 7, len(file) - 1} {
		want := ErrBackupTruncated
		if n < len(backupMagic) {
			want = ErrNotBackup
		}
		if err := verify(file[:n], testKey); !errors.Is(err, want) {
			t.Errorf("cut at %d of %d: %v, want %v", n, len(file), err, want)
		}
		if _, err := CheckBackupFrame(bytes.NewReader(file[:n])); !errors.Is(err, want) {
			t.Errorf("CheckBackupFrame cut at %d: %v, want %v", n, err, want)
		}
	}
	// A byte changed: in the magic, the salt or check (the key no longer
	// checks), a part's length, a part.
	for _, c := range []struct {
		at   int
		want error
	}{{0, ErrNotBackup}, {backupHeader - 40, ErrBackupWrongKey}, {backupHeader - 1, ErrBackupWrongKey},
		{backupHeader + 1, ErrBackupDamaged}, {backupHeader + 100, ErrBackupDamaged}, {len(file) / 2, ErrBackupDamaged}, {len(file) - 1, ErrBackupDamaged}} {
		b := bytes.Clone(file)
		b[c.at] ^= 1
		if err := verify(b, testKey); !errors.Is(err, c.want) {
			t.Errorf("byte %d flipped: %v, want %v", c.at, err, c.want)
		}
	}
	// Two parts swapped.
	b := bytes.Clone(file)
	p1 := b[backupHeader : backupHeader+4+backupPart+gcmOverhead]
	p2 := bytes.Clone(b[partEnd : partEnd+4+backupPart+gcmOverhead])
	copy(b[partEnd:], p1)
	copy(b[backupHeader:], p2)
	if err := verify(b, testKey); !errors.Is(err, ErrBackupDamaged) {
		t.Errorf("two parts swapped: %v", err)
	}
	if err := verify(append(bytes.Clone(file), 0), testKey); !errors.Is(err, ErrBackupDamaged) {
		t.Errorf("a byte after the end: %v", err)
	}
	if err := verify(file, bytes.Repeat([]byte{8}, KeySize)); !errors.Is(err, ErrBackupWrongKey) {
		t.Errorf("another key: %v", err)
	}
	b = bytes.Clone(file)
	b[len(backupMagic)] = 2
	if err := verify(b, testKey); err == nil || !strings.Contains(err.Error(), "format 2") {
		t.Errorf("format 2: %v", err)
	}
}

// stalled is a writer that blocks until released, a client that stopped
// reading; entered is closed at its first write.
type stalled struct {
	entered chan struct{}
	once    *sync.Once
	release chan struct{}
}

func (s stalled) Write(p []byte) (int, error) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return 0, io.ErrClosedPipe
}

// TestCloseEndsBackup: a backup whose client stopped reading is ended by
// Close, which waits for its read of Badger to end before closing it;
// a backup after Close is refused.
func TestCloseEndsBackup(t *testing.T) {
	s := openTest(t, t.TempDir())
	var b Batch
	for i := range 500 {
		b.Set(fmt.Sprintf("%s%04d", NodePrefix, i), bytes.Repeat([]byte{byte(i)}, 2000))
	}
	if err := s.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	w := stalled{entered: make(chan struct{}), once: &sync.Once{}, release: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := s.Backup(context.Background(), w, testKey, nil)
		done <- err
	}()
	// Once the backup is blocked on its writer, its reader soon is on
	// the handover; Close ends the reader.
	<-w.entered
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not end the backup's read")
	}
	close(w.release)
	if err := <-done; !errors.Is(err, errStoreClosing) {
		t.Fatalf("the backup ended with %v; want Close to have ended its read (%v)", err, errStoreClosing)
	}
	if _, err := s.Backup(context.Background(), io.Discard, testKey, nil); !errors.Is(err, errStoreClosing) {
		t.Fatalf("a backup after Close: %v", err)
	}
}

// TestReplace makes a live database hold exactly a backup's keys: keys
// the backup lacks are gone, its keys and files are back; a damaged
// backup changes nothing.
func TestReplace(t *testing.T) {
	want, file := backupOf(t)
	dir := t.TempDir()
	s := openTest(t, filepath.Join(dir, "db"))
	defer s.Close()
	var b Batch
	b.Set(NodePrefix+"000", []byte("an older record"))
	b.Set(PortPrefix+"stale", []byte("not in the backup"))
	if err := s.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	damaged := append([]byte{}, file...)
	damaged[len(damaged)/2] ^= 1
	if _, _, err := s.Replace(bytes.NewReader(damaged), testKey, dir); err == nil {
		t.Fatal("a damaged backup was taken")
	}
	if _, found, _ := s.Get(PortPrefix + "stale"); !found {
		t.Fatal("a damaged backup changed the database")
	}
	_, files, err := s.Replace(bytes.NewReader(file), testKey, dir)
	if err != nil {
		t.Fatal(err)
	}
	if string(files["secret"]) != "the coordinator's secret" {
		t.Fatalf("files %v", files)
	}
	got := map[string]string{}
	if err := s.Scan("", func(k string, v []byte) error { got[k] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d keys after Replace, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s after Replace: %.20q, want %.20q", k, got[k], v)
		}
	}
}
