package waitfor

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	var n atomic.Int32
	if !Until(5*time.Second, func() bool { return n.Add(1) >= 3 }) {
		t.Fatal("a condition that holds at the third look was not seen")
	}
	start := time.Now()
	if Until(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds was reported as held")
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Fatalf("gave up after %s; want the bound, 50ms", d)
	}
}
