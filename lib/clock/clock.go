// Package clock is the programs' time source: the current time and the
// timers that fire by it. Each part of the edge agent (outbox, bmc, relay,
// boot, netboot, sitecache, imagecache, sim), the ramdisk's protocol
// session (lib/session) and the MQTT link (lib/mqttlink) take one in
// their Config (nil: Real), so that their tests drive their timers with a
// Fake instead of waiting.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and makes timers that fire by it.
type Clock interface {
	Now() time.Time
	// NewTimer, NewTicker and AfterFunc are time's, on this clock.
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a *time.Timer on a Clock.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is a *time.Ticker on a Clock.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Or is c, or Real when c is nil (a Config's default).
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Since is the time elapsed on c since t.
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Real is the system clock.
type Real struct{}

func (Real) Now() time.Time                            { return time.Now() }
func (Real) NewTimer(d time.Duration) Timer            { return realTimer{time.NewTimer(d)} }
func (Real) NewTicker(d time.Duration) Ticker          { return realTicker{time.NewTicker(d)} }
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// Fake is a clock that moves only when told (Advance, Set): for tests.
// Its timers fire, in order of their time, when it passes them; a timer
// channel holds one value, as time's does, and a ticker that is not read
// drops ticks.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	pending []*fakeTimer
	// changed is closed (and replaced) whenever a timer is armed.
	changed chan struct{}
}

// NewFake returns a fake clock reading t.
func NewFake(t time.Time) *Fake { return &Fake{now: t, changed: make(chan struct{})} }

type fakeTimer struct {
	f      *Fake
	c      chan time.Time
	when   time.Time
	period time.Duration // tickers
	fn     func()        // AfterFunc
	armed  bool
}

// Now is the fake's time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{f: f, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &fakeTimer{f: f, c: make(chan time.Time, 1), period: d}
	t.Reset(d)
	return fakeTicker{t}
}

func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f, fn: fn}
	t.Reset(d)
	return t
}

// Advance moves the fake d forward, firing the timers it passes.
func (f *Fake) Advance(d time.Duration) { f.Set(f.Now().Add(d)) }

// Set moves the fake to t (never back), firing the timers it passes.
func (f *Fake) Set(t time.Time) {
	for {
		f.mu.Lock()
		var next *fakeTimer
		for _, p := range f.pending {
			if !p.when.After(t) && (next == nil || p.when.Before(next.when)) {
				next = p
			}
		}
		if next == nil {
			if t.After(f.now) {
				f.now = t
			}
			f.mu.Unlock()
			return
		}
		if next.when.After(f.now) {
			f.now = next.when
		}
		f.removeLocked(next)
		if next.period > 0 {
			next.when = next.when.Add(next.period)
			next.armed = true
			f.pending = append(f.pending, next)
		}
		now := f.now
		f.mu.Unlock()
		switch {
		case next.fn != nil:
			go next.fn()
		default:
			select {
			case next.c <- now:
			default:
			}
		}
	}
}

// Timers is how many timers and tickers are armed.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// WaitTimers waits until at least n timers and tickers are armed (the
// code under test reached its wait) or until timeout, real time, passes;
// it tells whether they were.
func (f *Fake) WaitTimers(n int, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		have, ch := len(f.pending), f.changed
		f.mu.Unlock()
		if have >= n {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

func (f *Fake) removeLocked(t *fakeTimer) bool {
	if !t.armed {
		return false
	}
	t.armed = false
	for i, p := range f.pending {
		if p == t {
			f.pending = append(f.pending[:i], f.pending[i+1:]...)
			break
		}
	}
	return true
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	return t.f.removeLocked(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	f := t.f
	f.mu.Lock()
	was := f.removeLocked(t)
	t.when, t.armed = f.now.Add(d), true
	f.pending = append(f.pending, t)
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
	if d <= 0 {
		f.Set(f.Now())
	}
	return was
}

type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) C() <-chan time.Time { return k.t.c }
func (k fakeTicker) Stop()               { k.t.Stop() }
