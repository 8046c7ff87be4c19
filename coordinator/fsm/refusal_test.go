package fsm

// httpCode is the status Ironic answers for a refusal, for the tests that
// cite Ironic's answers (coordinator/api maps reasons for real).
func (r *Refusal) httpCode() int {
	switch r.Reason {
	case Invalid:
		return 400
	case Conflict:
		return 409
	}
	return 0
}
