package drivers

import (
	"context"
	"sync"
)

// Warnings of a BMC command that succeeded with something left undone or
// unread (media that did not eject after the power went off, a reading
// that lost a field): the edge agent returns them in the command's result
// (protocol.DataWarnings) and the coordinator puts each in the node's
// history as a WARNING and counts it in /metrics, so that nothing the
// operator should know of stays only in a site's log.

type warnKey struct{}

type warnList struct {
	mu   sync.Mutex
	list []string
}

// MaxWarnings bounds the warnings one command returns (the first are kept).
const MaxWarnings = 16

// WithWarnings returns a context under which Warn collects a command's
// warnings, and the function that returns them (nil when none).
func WithWarnings(ctx context.Context) (context.Context, func() []string) {
	w := &warnList{}
	return context.WithValue(ctx, warnKey{}, w), func() []string {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.list) == 0 {
			return nil
		}
		return append([]string(nil), w.list...)
	}
}

// Warn notes a warning of the command ctx belongs to (nothing without
// WithWarnings). A warning says what was not done or read, the BMC's
// answer and URL, and what the operator may do.
func Warn(ctx context.Context, msg string) {
	w, _ := ctx.Value(warnKey{}).(*warnList)
	if w == nil || msg == "" {
		return
	}
	if len(msg) > 2048 {
		msg = msg[:2048] + "…"
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.list) < MaxWarnings {
		w.list = append(w.list, msg)
	}
}
