// Package waitfor is for tests: it waits for a condition to hold, polling
// the condition itself within a bound, instead of sleeping a fixed time
// and hoping that it holds by then. A test that uses it is as fast as
// the code under test and fails only when the condition never holds.
package waitfor

import "time"

// Poll is how often Until looks at its condition.
const Poll = 5 * time.Millisecond

// Until looks at cond every Poll until it holds or timeout (real time)
// passed, and tells whether it held.
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tk := time.NewTicker(Poll)
	defer tk.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		<-tk.C
	}
	return true
}
