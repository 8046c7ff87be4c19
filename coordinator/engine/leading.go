package engine

import "github.com/bmedge/bmedge/coordinator/store"

// answerConfirmed answers the callers of a batch that committed nothing
// once the committer, if it is a replicated log's (store.LeaderVerifier),
// confirms that this member still leads; it reports whether it took the
// answers on. A batch that committed something needs no confirmation:
// its commit needed the majority. One that committed nothing holds
// answers decided from the engine's memory alone (a verb refused by the
// node's state, a PATCH refused because the node is locked), which a
// leader cut off from the others, not knowing it yet, could give from a
// state that a newer leader has changed since: so they wait for the
// majority, and become 503 if it does not confirm. The confirmation runs
// beside the loop, which goes on with the next batch. A plain store (a
// single coordinator) answers at once, at no cost.
func (e *Engine) answerConfirmed(batch []*request, errs []error) bool {
	v, ok := e.commits.(store.LeaderVerifier)
	if !ok {
		return false
	}
	callers := false
	for _, r := range batch {
		callers = callers || r.done != nil
	}
	if !callers {
		return false
	}
	e.run.wg.Add(1)
	go func() {
		defer e.run.wg.Done()
		err := v.VerifyLeader(e.run.ctx)
		for i, r := range batch {
			switch {
			case r.done == nil:
			case err != nil:
				r.done <- errorf(Unavailable, "This coordinator cannot confirm that it still leads its cluster (%v); try again, or ask another member.", err)
			default:
				r.done <- errs[i]
			}
		}
	}()
	return true
}
