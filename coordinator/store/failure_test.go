package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// faultAt fails (or panics in) the nth call of op, counting every call.
type faultAt struct {
	mu    sync.Mutex
	op    string
	nth   int
	panic bool
	calls map[string]int
}

func (f *faultAt) Before(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[op]++
	if op != f.op || f.calls[op] != f.nth {
		return nil
	}
	if f.panic {
		panic("injected: runtime error: invalid memory address or nil pointer dereference")
	}
	return fmt.Errorf("injected: open 000042.vlog: %w", syscall.ENOSPC)
}

func (f *faultAt) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
}

// checkFailedForGood checks that s failed with a *FailedError and that
// no later call reaches Badger (faults counts the calls that would).
func checkFailedForGood(t *testing.T, s *Store, f *faultAt, want string) *FailedError {
	t.Helper()
	select {
	case <-s.Failed():
	default:
		t.Fatal("Failed is not closed after the failure")
	}
	var fe *FailedError
	if !errors.As(s.Err(), &fe) {
		t.Fatalf("Err() = %v, want a *FailedError", s.Err())
	}
	if !strings.Contains(fe.Error(), want) {
		t.Errorf("failure %q does not say %q", fe.Error(), want)
	}
	before := f.total()
	var b Batch
	b.Set(NodePrefix+"later", []byte("x"))
	calls := map[string]error{"Commit": s.Commit(context.Background(), &b), "DeletePrefix": s.DeletePrefix(HistoryPrefix)}
	_, calls["CollectGarbage"] = s.CollectGarbage()
	_, _, calls["Get"] = s.Get(NodePrefix + "a")
	calls["Scan"] = s.Scan(NodePrefix, func(string, []byte) error { return nil })
	calls["Keys"] = s.Keys(NodePrefix, "", func(string) bool { return true })
	for name, err := range calls {
		if name == "CollectGarbage" && err == nil {
			continue // nothing to flush: it does not reach Badger
		}
		if err != fe {
			t.Errorf("%s after the failure: %v, want the first failure", name, err)
		}
	}
	if n := f.total() - before; n != 0 {
		t.Errorf("%d Badger calls after the failure, want none", n)
	}
	return fe
}

// TestInjectedWriteFailureIsFatalForGood: a commit that fails (an
// injected "no space left on device") fails the store: the error says the
// cause and what to do, and no later call reaches Badger.
func TestInjectedWriteFailureIsFatalForGood(t *testing.T) {
	f := &faultAt{op: "write", nth: 2}
	s, err := Open(t.TempDir(), testKey, slog.New(slog.DiscardHandler), WithFaults(f))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b Batch
	b.Set(NodePrefix+"a", []byte("a"))
	if err := s.Commit(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(context.Background(), &b); err == nil {
		t.Fatal("the injected failure did not fail Commit")
	}
	fe := checkFailedForGood(t, s, f, "store write failed: no space left on device")
	if !strings.Contains(fe.Error(), "free disk space") {
		t.Errorf("the failure does not say what to do: %s", fe)
	}
	if err := s.Close(); err != fe {
		t.Errorf("Close of a failed store: %v, want its failure", err)
	}
}

// TestPanicInBadgerIsFatalNotACrash: a panic in a Badger call (here
// injected in the memtable flush that CollectGarbage makes) becomes the
// store's failure instead of crashing the process.
func TestPanicInBadgerIsFatalNotACrash(t *testing.T) {
	f := &faultAt{op: "flush", nth: 1, panic: true}
	s, err := Open(t.TempDir(), testKey, slog.New(slog.DiscardHandler), WithFaults(f))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	writeValueLog(t, s, flushAfter+flushAfter/4)
	s.lastCommit.Store(0) // quiet: CollectGarbage flushes now
	if _, err := s.CollectGarbage(); err == nil {
		t.Fatal("CollectGarbage after a panic in the flush: no error")
	}
	checkFailedForGood(t, s, f, "store flush failed: panic in Badger")
}

// writeValueLog commits n bytes of values that go to the value log.
func writeValueLog(t *testing.T, s *Store, n int) {
	t.Helper()
	val := []byte(strings.Repeat("v", 32<<10))
	for i := 0; i*len(val) < n; i++ {
		var b Batch
		b.Set(fmt.Sprintf("%sbig%03d", NodePrefix, i), val)
		if err := s.Commit(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFailedFlushIsNotRetried is issue 17's crash, in the store: the
// memtable flush of CollectGarbage fails because the process has no file
// descriptor left (real exhaustion: the NOFILE limit is lowered to the
// lowest free descriptor), then descriptors come back and CollectGarbage
// runs again. In Badger v4.9.6 the second DropPrefix crashes (SIGSEGV in
// skl.(*Skiplist).findLast, failure.go says why); the store must instead
// answer its first failure without calling Badger. It runs in a child
// process, whose limit it changes and whose crash it would be.
func TestFailedFlushIsNotRetried(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux's RLIMIT_NOFILE semantics")
	}
	if os.Getenv("BM_STORE_FLUSH_CHILD") == "1" {
		failedFlushChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFailedFlushIsNotRetried$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "BM_STORE_FLUSH_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CHILD OK") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, bad := range []string{"panic:", "SIGSEGV", "findLast"} {
		if strings.Contains(string(out), bad) {
			t.Fatalf("child's output has %q:\n%s", bad, out)
		}
	}
}

func failedFlushChild(t *testing.T) {
	dir, err := os.MkdirTemp("", "bm-store-flush-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := Open(dir, testKey, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	writeValueLog(t, s, flushAfter+flushAfter/4)

	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	// The kernel hands out the lowest free descriptor: the one this open
	// gets is free again after Close, and the next open would get it.
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	free := f.Fd()
	f.Close()
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: uint64(free), Max: orig.Max}); err != nil {
		t.Fatal(err)
	}
	s.lastCommit.Store(0)
	_, err1 := s.CollectGarbage()
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	var fe *FailedError
	if !errors.As(err1, &fe) || fe.Cause() != "too many open files" || fe.Op != "flush" {
		t.Fatalf("CollectGarbage without descriptors: %v, want the store's flush failure for too many open files", err1)
	}
	t.Logf("first: %v", err1)

	// Descriptors are back; more is written and writing stops again:
	// what made the second DropPrefix that crashed.
	s.large.Add(2 * flushAfter)
	s.lastCommit.Store(0)
	_, err2 := s.CollectGarbage()
	if err2 != fe {
		t.Fatalf("CollectGarbage after the failure: %v, want the first failure", err2)
	}
	var b Batch
	b.Set(NodePrefix+"x", []byte("x"))
	if err := s.Commit(context.Background(), &b); err != fe {
		t.Fatalf("Commit after the failure: %v, want the first failure", err)
	}
	fmt.Println("CHILD OK")
}
