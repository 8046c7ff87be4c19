package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/lib/kvstore"
)

func testKey(b byte) []byte {
	k := make([]byte, store.KeySize)
	for i := range k {
		k[i] = b + byte(i)
	}
	return k
}

func quietHCLog() hclog.Logger { return hclog.NewNullLogger() }

// The log on disk holds no record in the clear, and every file in it is
// the owner's alone.
func TestLogSealedAtRest(t *testing.T) {
	c := newInmemCluster(t, 3, nil)
	l := c.leader()
	commitKeys(t, l, 0, 40)
	for _, m := range c.members {
		wantKeys(t, m, 40)
	}
	for i, m := range c.members {
		m.Close()
		c.members[i] = nil
	}
	for _, dir := range c.dirs {
		root := filepath.Join(dir, "raft", walDir)
		var files, bytesSeen int
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if d.IsDir() {
				if fi.Mode().Perm() != 0o700 {
					t.Errorf("%s: mode %v, want 0700", p, fi.Mode().Perm())
				}
				return nil
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %v, want 0600", p, fi.Mode().Perm())
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files++
			bytesSeen += len(bytes.TrimRight(b, "\x00"))
			if containsRecord(b) {
				t.Errorf("%s holds a record in the clear", p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if files < 2 || bytesSeen < 40*20 {
			t.Fatalf("%s: %d files, %d bytes: the log is not where the test looks", root, files, bytesSeen)
		}
	}
	// And it opens again: a member restarted on it has every key.
	c.members[0] = c.open(0, nil)
	wantKeys(t, c.members[0], 40)
}

func sampleEntries(from, to uint64) []*raft.Log {
	var es []*raft.Log
	for i := from; i <= to; i++ {
		e := &raft.Log{Index: i, Term: 1 + i/10, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("record %d", i))}
		if i%4 == 0 {
			e.Extensions = []byte{byte(i), 1, 2}
		}
		es = append(es, e)
	}
	return es
}

func checkEntries(t *testing.T, s raft.LogStore, want []*raft.Log) {
	t.Helper()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != want[0].Index || last != want[len(want)-1].Index {
		t.Fatalf("log holds %d..%d, want %d..%d", first, last, want[0].Index, want[len(want)-1].Index)
	}
	for _, w := range want {
		var got raft.Log
		if err := s.GetLog(w.Index, &got); err != nil {
			t.Fatalf("entry %d: %v", w.Index, err)
		}
		if got.Term != w.Term || got.Type != w.Type || !bytes.Equal(got.Data, w.Data) || !bytes.Equal(got.Extensions, w.Extensions) {
			t.Fatalf("entry %d: got term %d type %v data %q ext %v, want term %d type %v data %q ext %v",
				w.Index, got.Term, got.Type, got.Data, got.Extensions, w.Term, w.Type, w.Data, w.Extensions)
		}
	}
}

// A member of an earlier version kept its log in Badger (raft/log): the
// first start moves its entries and stable state into the WAL and
// removes it; a move cut off before its end is done again.
func TestBadgerLogMoved(t *testing.T) {
	key := testKey(3)
	raftDir := t.TempDir()
	old := filepath.Join(raftDir, badgerLogDir)
	src, err := openLogStore(old, key, kvstore.Config{Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	want := sampleEntries(7, 300)
	if err := src.StoreLogs(want); err != nil {
		t.Fatal(err)
	}
	if err := src.Set([]byte("CurrentTerm"), []byte{0, 0, 0, 0, 0, 0, 0, 31}); err != nil {
		t.Fatal(err)
	}
	if err := src.Set([]byte("LastVoteTerm"), []byte{0, 0, 0, 0, 0, 0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	if err := src.Set([]byte("LastVoteCand"), []byte("m2")); err != nil {
		t.Fatal(err)
	}
	src.Close()
	// A move cut off: a half-written WAL beside the old log.
	if err := os.MkdirAll(filepath.Join(raftDir, walDir+".new"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(raftDir, walDir+".new", "00000000000000000001-0000000000000001.wal"), []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}

	lg, err := openLog(raftDir, key, kvstore.Config{Log: quietLog()}, quietHCLog(), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, lg, want)
	if term, err := lg.GetUint64([]byte("CurrentTerm")); err != nil || term != 31 {
		t.Fatalf("CurrentTerm %d, %v; want 31", term, err)
	}
	if term, err := lg.GetUint64([]byte("LastVoteTerm")); err != nil || term != 258 {
		t.Fatalf("LastVoteTerm %d, %v; want 258", term, err)
	}
	if v, err := lg.Get([]byte("LastVoteCand")); err != nil || string(v) != "m2" {
		t.Fatalf("LastVoteCand %q, %v; want m2", v, err)
	}
	// It takes appends after the moved entries.
	more := sampleEntries(301, 310)
	if err := lg.StoreLogs(more); err != nil {
		t.Fatal(err)
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{old, filepath.Join(raftDir, walDir+".new")} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s is still there (%v)", gone, err)
		}
	}
	lg, err = openLog(raftDir, key, kvstore.Config{Log: quietLog()}, quietHCLog(), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	checkEntries(t, lg, append(want, more...))
}

// A log does not open under another key, and an entry copied to another
// index does not open there.
func TestSealRefusals(t *testing.T) {
	raftDir := t.TempDir()
	lg, err := openLog(raftDir, testKey(1), kvstore.Config{Log: quietLog()}, quietHCLog(), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	es := sampleEntries(1, 20)
	if err := lg.StoreLogs(es); err != nil {
		t.Fatal(err)
	}
	// The raw (sealed) entry 5, stored again as entry 21.
	var raw raft.Log
	if err := lg.WAL.GetLog(5, &raw); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw.Data, []byte("record")) {
		t.Fatalf("entry 5 is stored in the clear: %q", raw.Data)
	}
	raw.Index = 21
	if err := lg.WAL.StoreLogs([]*raft.Log{&raw}); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := lg.GetLog(21, &got); !errors.Is(err, errSealedEntry) {
		t.Fatalf("an entry moved to index 21 opened: %v (%q)", err, got.Data)
	}
	if err := lg.DeleteRange(21, 21); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, lg, es)
	lg.Close()

	other, err := openLog(raftDir, testKey(2), kvstore.Config{Log: quietLog()}, quietHCLog(), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.GetLog(3, &got); !errors.Is(err, errSealedEntry) {
		t.Fatalf("entry 3 opened under another key: %v (%q)", err, got.Data)
	}
}

// A follower whose log runs past the leader's drops its tail (raft's
// DeleteRange at the end); the log opens again afterwards with every
// entry before the cut. (raft-wal before v0.4.1 sealed such a segment
// without its index and could not read it back.)
func TestTailDroppedAndReopened(t *testing.T) {
	raftDir := t.TempDir()
	lg, err := openLog(raftDir, testKey(1), kvstore.Config{Log: quietLog()}, quietHCLog(), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	es := sampleEntries(1, 30)
	if err := lg.StoreLogs(es); err != nil {
		t.Fatal(err)
	}
	if err := lg.DeleteRange(25, 30); err != nil {
		t.Fatal(err)
	}
	more := sampleEntries(25, 27)
	for _, e := range more {
		e.Term += 5
	}
	if err := lg.StoreLogs(more); err != nil {
		t.Fatal(err)
	}
	lg.Close()
	lg, err = openLog(raftDir, testKey(1), kvstore.Config{Log: quietLog()}, quietHCLog(), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	checkEntries(t, lg, append(es[:24], more...))
}
