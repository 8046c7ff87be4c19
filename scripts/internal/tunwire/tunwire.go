// Package tunwire is the emulated WAN link of the system tests and the
// benchmarks where the kernel has no tc netem: two TUN devices and a
// wire between them, in the process, that delays every packet (in
// order) and drops a share of them. Making the devices needs root
// (CAP_NET_ADMIN).
package tunwire

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// OpenTUN makes a TUN device (IP packets, no header) that lives as long
// as the returned file.
func OpenTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	// Non-blocking: the runtime's poller waits, and Close ends a Read.
	return os.NewFile(uintptr(fd), "tun:"+name), nil
}

// Wire carries packets between two TUN devices, each way after a delay
// and with a chance of loss, in order (the delay is the same for all).
type Wire struct {
	a, b *os.File
	mu   sync.Mutex
	// delay and loss are the impairment, per direction.
	delay time.Duration
	loss  float64
	wg    sync.WaitGroup
	once  sync.Once
	// Carried and Dropped count the packets, both ways.
	Carried, Dropped atomic.Int64
}

// New starts a wire between a and b, without delay or loss (Set).
func New(a, b *os.File) *Wire {
	w := &Wire{a: a, b: b}
	w.wg.Add(2)
	go w.pump(a, b)
	go w.pump(b, a)
	return w
}

// Set changes the delay and the loss (0 to 1) of each direction.
func (w *Wire) Set(delay time.Duration, loss float64) {
	w.mu.Lock()
	w.delay, w.loss = delay, loss
	w.mu.Unlock()
}

type packet struct {
	due time.Time
	b   []byte
}

func (w *Wire) pump(from, to *os.File) {
	defer w.wg.Done()
	// A queue deep enough for a full window at the delay; a packet that
	// finds it full is dropped, as a router's full queue would.
	q := make(chan packet, 8192)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range q {
			if d := time.Until(p.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := to.Write(p.b); err != nil && !isTemporary(err) {
				// The far end is down or gone: drop the packet.
				continue
			}
		}
	}()
	buf := make([]byte, 65536)
	for {
		n, err := from.Read(buf)
		if err != nil {
			if isTemporary(err) {
				continue
			}
			close(q)
			<-done
			return
		}
		w.mu.Lock()
		delay, loss := w.delay, w.loss
		w.mu.Unlock()
		if loss > 0 && rand.Float64() < loss {
			w.Dropped.Add(1)
			continue
		}
		select {
		case q <- packet{due: time.Now().Add(delay), b: append([]byte(nil), buf[:n]...)}:
			w.Carried.Add(1)
		default:
			w.Dropped.Add(1)
		}
	}
}

func isTemporary(err error) bool {
	return errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN)
}

// Close closes both devices and waits for the wire's goroutines.
func (w *Wire) Close() {
	w.once.Do(func() {
		w.a.Close()
		w.b.Close()
		w.wg.Wait()
	})
}
