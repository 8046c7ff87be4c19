// Package consoletest holds what the tests of the serial console share
// (the clients in drivers/ipmi/sol and drivers/redfish/serialssh, the
// end-to-end tests in scripts/systest/consolee2e): a console's output
// collected as it comes, waited on for a text, the skip of a test whose
// real component is missing, and a tiny guest to boot in QEMU (Guest).
// Only _test.go files import it: nothing in a program may.
package consoletest

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Need skips (or, with BM_REQUIRE_ALL=1, fails) without a real component.
func Need(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("BM_REQUIRE_ALL") == "1" {
		t.Fatalf("%s: %v", what, err)
	}
	t.Skipf("%s: %v", what, err)
}

// Output collects what a console reads.
type Output struct {
	mu  sync.Mutex
	buf bytes.Buffer
	err error
}

// Collect reads r until it ends, into an Output.
func Collect(r io.Reader) *Output {
	o := &Output{}
	go func() {
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			o.mu.Lock()
			o.buf.Write(b[:n])
			if err != nil {
				o.err = err
			}
			o.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return o
}

func (o *Output) String() string { o.mu.Lock(); defer o.mu.Unlock(); return o.buf.String() }

// WaitFor waits up to d for s in the output, calling poke (if any) every
// 3 s; it fails the test if the console ends first or s never comes.
func (o *Output) WaitFor(t *testing.T, s string, d time.Duration, poke func()) {
	t.Helper()
	end, next := time.Now().Add(d), time.Now()
	for time.Now().Before(end) {
		if strings.Contains(o.String(), s) {
			return
		}
		o.mu.Lock()
		err := o.err
		o.mu.Unlock()
		if err != nil {
			t.Fatalf("the console ended before %q: %v", s, err)
		}
		if poke != nil && time.Now().After(next) {
			poke()
			next = time.Now().Add(3 * time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out := o.String()
	if len(out) > 3000 {
		out = out[len(out)-3000:]
	}
	t.Fatalf("no %q on the console within %s; its end:\n%s", s, d, out)
}
