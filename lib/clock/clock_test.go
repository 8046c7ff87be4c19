package clock

import (
	"testing"
	"time"
)

func TestFakeTimersFireInOrderWhenPassed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(t0)
	a := f.NewTimer(2 * time.Second)
	tk := f.NewTicker(time.Second)
	fired := make(chan time.Time, 1)
	f.AfterFunc(3*time.Second, func() { fired <- f.Now() })
	f.Advance(time.Second)
	if got := <-tk.C(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("tick at %v", got)
	}
	select {
	case <-a.C():
		t.Fatal("2 s timer fired at 1 s")
	default:
	}
	f.Advance(time.Second)
	if got := <-a.C(); !got.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("timer at %v", got)
	}
	<-tk.C()
	if a.Stop() {
		t.Fatal("Stop of a fired timer says it was armed")
	}
	f.Advance(time.Second)
	if got := <-fired; !got.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("AfterFunc at %v", got)
	}
	tk.Stop()
	if f.Timers() != 0 {
		t.Fatalf("%d timers still armed", f.Timers())
	}
	if !f.Now().Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("now %v", f.Now())
	}
}
