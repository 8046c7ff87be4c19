// Package ratelog logs refusals (bad logins, connections over a budget,
// unknown tokens) at a bounded rate: the first of a kind is logged at
// once, the rest of an interval are counted and reported in one line when
// the next one comes after the interval. A stranger who can make the
// process refuse something must not be able to fill its disk with log
// lines. It must never take a kind from the input (a user name, an
// address): kinds are fixed strings in the code, so the table stays small.
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval is how often a kind is logged at most.
const DefaultInterval = 10 * time.Second

// Limiter logs each kind of refusal at most once per interval, with the
// count of those it left out since the last line.
type Limiter struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	kinds map[string]*kind
}

type kind struct {
	last       time.Time
	suppressed int64
}

// New returns a Limiter that writes to log at most once per interval per
// kind (DefaultInterval when interval <= 0).
func New(log *slog.Logger, interval time.Duration) *Limiter {
	return NewWithClock(log, interval, time.Now)
}

// NewWithClock is New with an injected clock, for tests.
func NewWithClock(log *slog.Logger, interval time.Duration, now func() time.Time) *Limiter {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Limiter{log: log, every: interval, now: now, kinds: map[string]*kind{}}
}

// Warn logs msg with args at warning level under kind, unless a line of
// that kind was written less than the interval ago; then it only counts.
// The line that is written carries "suppressed": how many of its kind
// were left out since the previous line. It reports whether it wrote.
func (l *Limiter) Warn(kindName, msg string, args ...any) bool {
	return l.emit(slog.LevelWarn, kindName, msg, args)
}

// Info is Warn at info level.
func (l *Limiter) Info(kindName, msg string, args ...any) bool {
	return l.emit(slog.LevelInfo, kindName, msg, args)
}

func (l *Limiter) emit(level slog.Level, kindName, msg string, args []any) bool {
	if l == nil || l.log == nil {
		return false
	}
	now := l.now()
	l.mu.Lock()
	k := l.kinds[kindName]
	if k == nil {
		k = &kind{}
		l.kinds[kindName] = k
	}
	if !k.last.IsZero() && now.Sub(k.last) < l.every {
		k.suppressed++
		l.mu.Unlock()
		return false
	}
	n := k.suppressed
	k.suppressed = 0
	k.last = now
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n, "interval", l.every.String())
	}
	l.log.Log(context.Background(), level, msg, args...)
	return true
}

// Suppressed returns how many lines of kind are counted but not yet
// written.
func (l *Limiter) Suppressed(kindName string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := l.kinds[kindName]; k != nil {
		return k.suppressed
	}
	return 0
}
