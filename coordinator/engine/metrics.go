package engine

import (
	"errors"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// verbDone gives a verb's answer and latency to the metrics; *err is the
// verb's error, read when Verb returns.
func (e *Engine) verbDone(verb fsm.Event, start time.Time, err *error) {
	if e.cfg.Metrics == nil {
		return
	}
	outcome := "accepted"
	var ee *Error
	switch {
	case errors.As(*err, &ee):
		outcome = ee.Kind.String()
	case *err != nil:
		outcome = Internal.String()
	}
	e.cfg.Metrics.Verb(string(verb), outcome, time.Since(start))
}

// runHeld runs one request in the loop (the loop holds e.reg.mu) and gives
// how long it held the loop to the metrics: the longest single hold is
// what any other request or agent message may have to wait behind one
// request, besides the batch's commit.
func (e *Engine) runHeld(fn func(*tx) error, t *tx) error {
	if e.cfg.Metrics == nil {
		return fn(t)
	}
	start := e.cfg.Clock.Now()
	err := fn(t)
	e.cfg.Metrics.LoopHeld(e.cfg.Clock.Now().Sub(start))
	return err
}
