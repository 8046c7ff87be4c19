package store

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// testKey is the encryption key of the tests' databases.
var testKey = bytes.Repeat([]byte{7}, KeySize)

func openTest(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, testKey, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCommitSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	var b Batch
	b.Set(NodePrefix+"a", []byte(`{"uuid":"a"}`))
	b.Set(NodePrefix+"b", []byte(`{"uuid":"b"}`))
	b.Set(PortPrefix+"52:54:00:00:00:01", []byte("a"))
	if err := s.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	var del Batch
	del.Delete(NodePrefix + "b")
	if err := s.Commit(context.Background(), &del); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(context.Background(), &Batch{}); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openTest(t, dir)
	defer s.Close()
	var keys []string
	if err := s.Scan(NodePrefix, func(k string, v []byte) error {
		keys = append(keys, k)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != NodePrefix+"a" {
		t.Fatalf("nodes after reopen: %v, want only %sa", keys, NodePrefix)
	}
	v, found, err := s.Get(PortPrefix + "52:54:00:00:00:01")
	if err != nil || !found || string(v) != "a" {
		t.Fatalf("port: %q %v %v", v, found, err)
	}
	if _, found, err := s.Get(NodePrefix + "b"); err != nil || found {
		t.Fatalf("deleted node still found (%v, %v)", found, err)
	}
}

// A batch larger than one Badger transaction is split and every part
// lands.
func TestCommitSplitsHugeBatch(t *testing.T) {
	s := openTest(t, t.TempDir())
	defer s.Close()
	var b Batch
	val := bytes.Repeat([]byte("x"), 512) // inline in the LSM tree (under the value threshold)
	const n = 20000                       // ~10 MiB: more than one transaction holds
	for i := 0; i < n; i++ {
		b.Set(fmt.Sprintf("%s%08d", HistoryPrefix, i), val)
	}
	if err := s.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if s.parts < 2 {
		t.Fatalf("the batch took %d transaction(s); the test must exceed one to check the split", s.parts)
	}
	count := 0
	if err := s.Scan(HistoryPrefix, func(k string, v []byte) error {
		if len(v) != len(val) {
			return fmt.Errorf("%s: %d bytes", k, len(v))
		}
		count++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if count != n {
		t.Fatalf("%d of %d keys found", count, n)
	}
}

func TestDeletePrefix(t *testing.T) {
	s := openTest(t, t.TempDir())
	defer s.Close()
	var b Batch
	b.Set(HistoryPrefix+"a/1", []byte("1"))
	b.Set(HistoryPrefix+"a/2", []byte("2"))
	b.Set(HistoryPrefix+"b/1", []byte("3"))
	if err := s.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePrefix(HistoryPrefix + "a/"); err != nil {
		t.Fatal(err)
	}
	var keys []string
	_ = s.Scan(HistoryPrefix, func(k string, _ []byte) error { keys = append(keys, k); return nil })
	if strings.Join(keys, ",") != HistoryPrefix+"b/1" {
		t.Fatalf("after DeletePrefix: %v", keys)
	}
}

func TestOpenTwiceSaysWhy(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	defer s.Close()
	_, err := Open(dir, testKey, slog.Default())
	if err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("second Open of the same folder: %v, want an error that mentions --data-dir", err)
	}
}

// A batch crosses a log as bytes: its writes and deletions come back in
// order, and damaged bytes are refused.
func TestBatchMarshal(t *testing.T) {
	var b Batch
	b.Set("n/a", []byte("one"))
	b.Delete("h/a/1")
	b.Set("s/x", []byte("two"))
	data, err := b.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var c Batch
	if err := c.UnmarshalBinary(data); err != nil {
		t.Fatal(err)
	}
	var got []string
	c.Each(func(k string, v []byte) {
		if v == nil {
			got = append(got, "del "+k)
			return
		}
		got = append(got, fmt.Sprintf("set %s=%q", k, v))
	})
	if want := `set n/a="one",del h/a/1,set s/x="two"`; strings.Join(got, ",") != want {
		t.Fatalf("decoded %v, want %s", got, want)
	}
	if err := new(Batch).UnmarshalBinary(data[:len(data)-2]); err == nil {
		t.Fatal("a truncated batch was decoded")
	}
	s := openTest(t, t.TempDir())
	defer s.Close()
	if err := s.Commit(context.Background(), &c); err != nil {
		t.Fatal(err)
	}
	if v, found, _ := s.Get("s/x"); !found || string(v) != "two" {
		t.Fatalf("s/x after commit: found %v, %q", found, v)
	}
}

// TestBatchSize: a batch's size is its keys' and values' bytes.
func TestBatchSize(t *testing.T) {
	var b Batch
	b.Set("ab", []byte("cde"))
	b.Delete("f")
	if got := b.Size(); got != 6 {
		t.Fatalf("size %d, want 6 (keys ab and f, value cde)", got)
	}
}
