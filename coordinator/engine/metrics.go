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
