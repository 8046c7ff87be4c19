package outbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/kvstore"
	"github.com/bmedge/bmedge/lib/waitfor"
)

// stateDirSize is what du counts (allocated blocks) for every file under
// dir: Badger allocates its active files sparsely.
func stateDirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return nil // removed meanwhile (Badger replaces files)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		} else {
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// fillOutbox writes n records as the agent does for results (written,
// then rewritten acked), each with a payload of ~700 bytes that does not
// compress, and returns their sequence numbers.
func fillOutbox(t *testing.T, s *Store, first uint64, n int) []uint64 {
	t.Helper()
	seqs := make([]uint64, 0, n)
	for i := range n {
		seq := first + uint64(i)
		raw := make([]byte, 300)
		_, _ = rand.Read(raw)
		rec := &Record{ID: "r" + hex.EncodeToString(raw[:8]), Topic: "bm/v1/s1/bmc/evt", Payload: []byte(`{"kind":"result","output":"` + hex.EncodeToString(raw) + `"}`),
			Cmd: "c" + hex.EncodeToString(raw[8:16]), At: time.Now(), Deadline: time.Now().Add(time.Minute)}
		if err := s.Put(seq, rec); err != nil {
			t.Fatal(err)
		}
		acked := *rec
		acked.Acked = time.Now()
		s.Later(seq, &acked)
		seqs = append(seqs, seq)
	}
	return seqs
}

// TestOutboxGCShrinksStateFolder: after many outbox records are deleted
// (the done-records' retention ended) and the store collects garbage,
// the state folder (Badger on disk) is smaller than it was with them,
// and close to what it was before any was written; the store still holds
// the records that were not deleted, across a restart.
func TestOutboxGCShrinksStateFolder(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	s, err := OpenStore(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	empty := stateDirSize(t, dir)

	// Five rounds of 4000 records (~3 MB each written twice: as Badger's
	// 4 MiB memtables fill, they go to tables on disk).
	var all []uint64
	for r := range 5 {
		all = append(all, fillOutbox(t, s, uint64(r*4000+1), 4000)...)
	}
	keep := fillOutbox(t, s, 1_000_000, 10)
	if err := s.CollectNow(); err != nil {
		t.Fatal(err)
	}
	full := stateDirSize(t, dir)
	t.Logf("state folder: empty %d KiB, with %d records %d KiB", empty>>10, len(all)+len(keep), full>>10)

	for _, seq := range all {
		s.Later(seq, nil)
	}
	if err := s.CollectNow(); err != nil {
		t.Fatal(err)
	}
	after := stateDirSize(t, dir)
	t.Logf("after deleting %d records and collecting: %d KiB (%d flushes)", len(all), after>>10, s.flushes.Load())
	if after > full/3 {
		t.Fatalf("state folder after deleting %d of %d records and collecting garbage: %d KiB, with them %d KiB: the deleted records' space was not reclaimed",
			len(all), len(all)+len(keep), after>>10, full>>10)
	}

	// The records kept are still there, after a restart too.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = OpenStore(dir, log); err != nil {
		t.Fatal(err)
	}
	seqs, recs, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != len(keep) || seqs[0] != keep[0] || recs[0].Acked.IsZero() {
		t.Fatalf("after the collection and a restart the outbox holds %d records (first %v), want the %d kept, acked", len(seqs), seqs, len(keep))
	}
}

// TestOutboxGCWhenWritingStops: nobody asks for a collection; once enough
// was deleted and no write came for a moment, the store flushes and
// collects by itself, and the state folder shrinks (what an idle site's
// agent does after forgetting the results of its last deploys).
func TestOutboxGCWhenWritingStops(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	seqs := fillOutbox(t, s, 1, 12000)
	// Let the writes' own flush happen, then measure with them.
	waitfor.Until(60*time.Second, func() bool { return s.flushes.Load() != 0 })
	full := stateDirSize(t, dir)
	flushes := s.flushes.Load()
	for _, seq := range seqs {
		s.Later(seq, nil)
	}
	if !waitfor.Until(60*time.Second, func() bool { return s.flushes.Load() != flushes }) {
		t.Fatal("no flush within 60 s after the deletions stopped")
	}
	after := stateDirSize(t, dir)
	t.Logf("state folder with %d records %d KiB, after deleting them and the store's own collection %d KiB", len(seqs), full>>10, after>>10)
	if after > full/3 {
		t.Fatalf("state folder after deleting all %d records: %d KiB, with them %d KiB: the store did not reclaim their space by itself", len(seqs), after>>10, full>>10)
	}
}

// TestOutboxFlushFailures: when the write that starts a flush fails (a
// full disk, no file descriptor left), the store does not go on to
// Badger's DropPrefix (which, after failing its own flush, left the
// coordinator with a released memtable and a crash, issue 17); it keeps
// working and flushes at a later try. When DropPrefix itself fails, the
// store stops using Badger: writes fail with an error that says to
// restart the agent, close does not touch the database, and the next
// start opens it with every record written before.
func TestOutboxFlushFailures(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	// The injected failures (the writer reads fail; steps lists the
	// flush steps it went through: its key's write and DropPrefix, which
	// kvstore calls "flush").
	var mu sync.Mutex
	var steps []string
	fail := map[string]error{"write": errors.New("injected: no space left on device")}
	faults := kvstore.FaultsFunc(func(op string) error {
		step := map[string]string{"write": "write", "flush": "drop"}[op]
		if step == "" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, step)
		return fail[step]
	})
	s, err := OpenStore(dir, log, kvstore.WithFaults(faults))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	took := func() string {
		mu.Lock()
		defer mu.Unlock()
		out := strings.Join(steps, ",")
		steps = nil
		return out
	}
	seqs := fillOutbox(t, s, 1, 3000)
	keep := fillOutbox(t, s, 100_000, 5)
	for _, seq := range seqs {
		s.Later(seq, nil)
	}

	// 1. The flush's first write fails (the store's own flush, too, if
	// it came first).
	err = s.CollectNow()
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("collection with the flush's write failing: %v, want the write's error", err)
	}
	if st := took(); strings.Contains(st, "drop") || s.flushes.Load() != 0 {
		t.Fatalf("after the flush's write failed the store went on (steps %s, flushes %d); DropPrefix must not follow a failed write", st, s.flushes.Load())
	}
	if err := s.Put(200_000, &Record{ID: "after", Topic: "t", Payload: []byte("{}"), At: time.Now()}); err != nil {
		t.Fatalf("a write after a failed flush: %v", err)
	}
	before := stateDirSize(t, dir)
	mu.Lock()
	fail = map[string]error{}
	mu.Unlock()
	if err := s.CollectNow(); err != nil {
		t.Fatalf("the next collection: %v", err)
	}
	if st := took(); !strings.Contains(st, "write,drop") || s.flushes.Load() < 1 {
		t.Fatalf("the next collection went through %s (flushes %d), want write,drop and a flush", st, s.flushes.Load())
	}
	if after := stateDirSize(t, dir); after > before/3 {
		t.Fatalf("state folder after the retried flush: %d KiB, before it %d KiB", after>>10, before>>10)
	}

	// 2. DropPrefix fails: the store is broken for good, cleanly.
	mu.Lock()
	fail = map[string]error{"drop": errors.New("injected: while trying to flush memtable: too many open files")}
	mu.Unlock()
	// (an acked record: something for a flush to do)
	if err := s.Put(300_000, &Record{ID: "last", Topic: "t", Payload: []byte("{}"), At: time.Now(), Acked: time.Now()}); err != nil {
		t.Fatal(err)
	}
	err = s.CollectNow()
	if err == nil || !strings.Contains(err.Error(), "restart the edge agent") {
		t.Fatalf("collection with DropPrefix failing: %v, want an error that says to restart the agent", err)
	}
	err = s.Put(400_000, &Record{ID: "lost", Topic: "t", Payload: []byte("{}"), At: time.Now()})
	if err == nil || !strings.Contains(err.Error(), "restart the edge agent") {
		t.Fatalf("a write after DropPrefix failed: %v, want an error that says to restart the agent", err)
	}
	if err := s.Close(); err == nil {
		t.Fatal("close of a broken store reported no error")
	}
	// A real failure leaves Badger open at close (the process's exit
	// then releases its directory lock); an injected one leaves it
	// sound, and kvstore's Close closes it, so it opens again here.
	if s, err = OpenStore(dir, log); err != nil {
		t.Fatalf("reopening after the store broke: %v", err)
	}
	got, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]uint64{}, keep...), 200_000, 300_000)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after reopening the outbox holds records %v, want %v (those written before it broke)", got, want)
	}
}
