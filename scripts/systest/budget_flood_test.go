package systest

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/waitfor"
)

// flood holds n idle TCP connections from the loopback address from to
// to, as a stranger does: they send nothing, and each one that is closed
// is opened again (at most reopenRate a second, all together). It counts
// the connections the server closed within a second of their opening
// (refused at accept) and those it holds now.
type flood struct {
	n          int
	stop       chan struct{}
	wg         sync.WaitGroup
	mu         sync.Mutex
	conns      map[net.Conn]bool
	stopped    bool
	held       atomic.Int64
	closedFast atomic.Int64
	dials      atomic.Int64
}

// startFlood starts the flood. A connection the server closes at its
// deadline is opened again at once (the flood keeps its size); one
// closed at once (refused) is opened again a second later, so that the
// refused ones do not spin. The first openings are spread over 8 s, so
// that the server's 10 s deadline does not close them all at once (a
// window a client could slip through).
func startFlood(t *testing.T, from, to string, n int) *flood {
	t.Helper()
	f := &flood{n: n, stop: make(chan struct{}), conns: map[net.Conn]bool{}}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 3 * time.Second}
	for i := 0; i < n; i++ {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			wait := time.Duration(i) * 8 * time.Second / time.Duration(n)
			for {
				select {
				case <-f.stop:
					return
				case <-time.After(wait):
				}
				c, err := d.Dial("tcp", to)
				f.dials.Add(1)
				if err != nil {
					wait = time.Second
					continue
				}
				f.mu.Lock()
				if f.stopped {
					f.mu.Unlock()
					c.Close()
					return
				}
				f.conns[c] = true
				f.mu.Unlock()
				f.held.Add(1)
				opened := time.Now()
				_, err = c.Read(make([]byte, 1))
				f.held.Add(-1)
				wait = 0
				if err != nil && !errors.Is(err, net.ErrClosed) && time.Since(opened) < time.Second {
					f.closedFast.Add(1)
					wait = time.Second
				}
				f.mu.Lock()
				delete(f.conns, c)
				f.mu.Unlock()
				c.Close()
			}
		}()
	}
	t.Cleanup(f.close)
	return f
}

// close ends the flood and closes its connections (more than once is fine).
func (f *flood) close() {
	select {
	case <-f.stop:
		return
	default:
	}
	close(f.stop)
	f.mu.Lock()
	f.stopped = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// await waits until the flood has opened all its connections once and
// the server refused at least refused of them, then, if it refused any,
// until it refuses one more (a refused connection is opened again a
// second later): the budgets hold past the flood's first round.
func (f *flood) await(t *testing.T, refused int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for f.dials.Load() < int64(f.n) || f.closedFast.Load() < refused {
		if time.Now().After(deadline) {
			t.Fatalf("flood of %d: %d dials, %d closed at once, %d held; want %d closed at once (refused at accept)",
				f.n, f.dials.Load(), f.closedFast.Load(), f.held.Load(), refused)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c0 := f.closedFast.Load(); c0 > 0 && !waitfor.Until(time.Until(deadline)+10*time.Second, func() bool { return f.closedFast.Load() > c0 }) {
		t.Fatalf("flood of %d: no connection refused after the first %d (%d dials, %d held)", f.n, c0, f.dials.Load(), f.held.Load())
	}
	t.Logf("flood of %d: %d dials, %d closed at once, %d held", f.n, f.dials.Load(), f.closedFast.Load(), f.held.Load())
}
