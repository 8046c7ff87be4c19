package boot

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// dumpAttempts is how many times a netlink list is asked for when the
// kernel says the list changed while it was being read.
const dumpAttempts = 10

// dumpRetry calls list until it answers without EINTR, at most
// dumpAttempts times. netlink reports EINTR when the kernel flagged a
// dump as interrupted (NLM_F_DUMP_INTR: the addresses or links changed
// while they were read, as they do right after a DHCP lease is
// configured); reading the list again is the answer, not failing the
// boot.
func dumpRetry[T any](list func() (T, error)) (T, error) {
	var v T
	var err error
	for i := 0; i < dumpAttempts; i++ {
		if v, err = list(); err == nil || !errors.Is(err, unix.EINTR) {
			return v, err
		}
		time.Sleep(time.Duration(i+1) * 5 * time.Millisecond)
	}
	return v, err
}
