package boot

import (
	"errors"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDumpRetry: an interrupted netlink dump (EINTR, as netlink reports
// NLM_F_DUMP_INTR) is read again; another error is not; a dump that
// stays interrupted fails after dumpAttempts reads.
func TestDumpRetry(t *testing.T) {
	calls := 0
	got, err := dumpRetry(func() (int, error) {
		if calls++; calls < 3 {
			return 0, syscall.Errno(unix.EINTR)
		}
		return 42, nil
	})
	if err != nil || got != 42 || calls != 3 {
		t.Fatalf("after two interrupted dumps: %d, %v in %d calls, want 42 in 3", got, err, calls)
	}
	calls = 0
	other := errors.New("no such device")
	if _, err := dumpRetry(func() (int, error) { calls++; return 0, other }); !errors.Is(err, other) || calls != 1 {
		t.Fatalf("another error: %v in %d calls, want it at once", err, calls)
	}
	calls = 0
	if _, err := dumpRetry(func() (int, error) { calls++; return 0, syscall.Errno(unix.EINTR) }); !errors.Is(err, unix.EINTR) || calls != dumpAttempts {
		t.Fatalf("always interrupted: %v in %d calls, want EINTR after %d", err, calls, dumpAttempts)
	}
}
