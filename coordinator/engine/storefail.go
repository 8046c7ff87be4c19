package engine

import (
	"errors"
	"sync"

	"github.com/bmedge/bmedge/coordinator/store"
)

// The database failing is fatal, in a controlled way (crash-only: a
// restart recovers from what is on disk, where every acknowledged change
// is): the first failure — a commit that fails, the store failing by
// itself (an error Badger logs from its own goroutines), a garbage
// collection that fails — stops the engine taking work. Requests then get
// Unavailable (the API's 503) at once instead of waiting, the failure is
// logged in one line that names the cause and what to do, Failed is
// closed, and whoever runs the engine ends the process (coordinator
// serve exits with status 3). The store calls Badger no more after its
// failure (store/failure.go says why: a second call can crash).

// fatalState is the engine's failure; set once.
type fatalState struct {
	once   sync.Once
	err    *store.FailedError
	failed chan struct{}
}

func newFatalState() fatalState { return fatalState{failed: make(chan struct{})} }

// Failed is closed when the engine has stopped because its database
// failed; Err then says why. The process must end: the engine takes no
// more work.
func (e *Engine) Failed() <-chan struct{} { return e.run.fatal.failed }

// Err is the database failure that stopped the engine (a
// *store.FailedError), or nil.
func (e *Engine) Err() error {
	select {
	case <-e.run.fatal.failed:
		return e.run.fatal.err
	default:
		return nil
	}
}

// fail stops the engine for err, once: later failures are consequences
// of the first.
func (e *Engine) fail(err error) {
	e.run.fatal.once.Do(func() {
		var fe *store.FailedError
		if !errors.As(err, &fe) {
			// A failure that did not come through the store's checks
			// (not expected): stopping is still the safe answer.
			fe = &store.FailedError{Op: "write", Err: err}
		}
		e.run.fatal.err = fe
		// The line is written before Failed closes: whoever sees the
		// failure (a request's 503, serve's exit) finds it logged.
		if errors.Is(err, store.ErrNotLeading) {
			e.cfg.Log.Warn("the engine stops: this cluster member no longer leads (its last batch was not committed, and nothing of it was sent)", "err", err)
		} else {
			e.cfg.Log.Error(fe.Error(), "err", fe.Err)
		}
		close(e.run.fatal.failed)
		if e.cfg.OnFatal != nil {
			e.cfg.OnFatal(fe)
		}
	})
}

// Stopped is the error (Unavailable) every request gets once the engine
// has stopped for a database failure, or nil: the API answers it to
// reads too, which would otherwise show changes that were not stored.
func (e *Engine) Stopped() error {
	if e.Err() == nil {
		return nil
	}
	return e.stoppedError()
}

// stoppedError is what requests get once the engine has failed.
func (e *Engine) stoppedError() *Error {
	fe := e.run.fatal.err
	if errors.Is(fe, store.ErrNotLeading) {
		return errorf(Unavailable, "This coordinator no longer leads its cluster, so this request was not stored; send it again: any member passes it to the new leader.")
	}
	return errorf(Unavailable, "The coordinator has stopped: its database failed (store %s: %s), so this request was not stored; it exits, and a restart recovers every acknowledged change.", fe.Op, fe.Cause())
}

// watchStore fails the engine when the store fails by itself; it ends
// at Close.
func (e *Engine) watchStore() {
	defer e.run.wg.Done()
	select {
	case <-e.run.stopped:
	case <-e.st.Failed():
		e.fail(e.st.Err())
	}
}
