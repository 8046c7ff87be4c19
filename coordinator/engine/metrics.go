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
	code := 202
	var ee *Error
	switch {
	case errors.As(*err, &ee):
		code = ee.Code
	case *err != nil:
		code = 500
	}
	e.cfg.Metrics.Verb(string(verb), code, time.Since(start))
}
