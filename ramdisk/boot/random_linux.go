package boot

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// WaitRandom blocks until the kernel's random number generator is
// initialised, so that crypto/rand (TLS, tokens, DHCP transaction ids)
// does not stall later at a worse moment. Under emulation without RDRAND
// this needs a hardware RNG (virtio-rng) or jitter entropy; it logs that
// it waits and how long it took.
func WaitRandom(logf func(string, ...any)) (time.Duration, error) {
	buf := make([]byte, 1)
	if _, err := unix.Getrandom(buf, unix.GRND_NONBLOCK); err == nil {
		logf("randomness: ready")
		return 0, nil
	} else if !errors.Is(err, unix.EAGAIN) {
		return 0, fmt.Errorf("getrandom: %w", err)
	}
	logf("randomness: waiting for the kernel's entropy pool (getrandom)")
	start := time.Now()
	for {
		_, err := unix.Getrandom(buf, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			return time.Since(start), fmt.Errorf("getrandom: %w", err)
		}
	}
	d := time.Since(start)
	logf("randomness: ready after %s", d.Round(time.Millisecond))
	return d, nil
}
