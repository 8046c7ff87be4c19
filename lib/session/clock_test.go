package session

import (
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// TestSessionRunsOnItsClock: the hellos, the heartbeats and the resends
// of an unacknowledged result go by the session's clock, so a fake one
// drives them in no time, and the messages carry its time.
func TestSessionRunsOnItsClock(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fake := clock.NewFake(t0)
	r := &stepRunner{ran: make(chan string, 1)}
	s, w := start(t, r, Config{Clock: fake, Heartbeat: 10 * time.Second, HelloInterval: 2 * time.Second, ResendInterval: 5 * time.Second})
	hello := w.await(t, 5*time.Second, "hello", kind(protocol.KindHello))
	if !hello.Sent.Equal(t0) {
		t.Fatalf("hello sent at %s; want the clock's %s", hello.Sent, t0)
	}
	// The hello's timer and the resend ticker.
	if !fake.WaitTimers(2, 5*time.Second) {
		t.Fatal("the session armed no hello timer")
	}
	if n := w.count(kind(protocol.KindHello)); n != 1 {
		t.Fatalf("%d hellos before the clock moved; want 1", n)
	}
	fake.Advance(2 * time.Second)
	w.await(t, 5*time.Second, "second hello", func(*protocol.Message) bool { return w.count(kind(protocol.KindHello)) >= 2 })

	s.Deliver(&protocol.Message{Kind: protocol.KindWelcome, Node: "n1", BootID: s.BootID(), Token: "tok"})
	beats := func(n int) func(*protocol.Message) bool {
		return func(*protocol.Message) bool { return w.count(kind(protocol.KindHeartbeat)) >= n }
	}
	w.await(t, 5*time.Second, "first heartbeat", beats(1))
	// The jitter before the ticker, at most one interval.
	if !fake.WaitTimers(2, 5*time.Second) {
		t.Fatal("the session armed no heartbeat jitter")
	}
	fake.Advance(10 * time.Second)
	w.await(t, 5*time.Second, "heartbeat after the jitter", beats(2))
	if !fake.WaitTimers(2, 5*time.Second) {
		t.Fatal("the session armed no heartbeat ticker")
	}
	fake.Advance(10 * time.Second)
	w.await(t, 5*time.Second, "heartbeat of the ticker", beats(3))

	s.Deliver(&protocol.Message{Kind: protocol.KindCommand, ID: "c1", Action: protocol.ActionInbandRun, Token: "tok",
		Step: &protocol.Step{Interface: "deploy", Step: "erase_devices"}})
	<-r.ran
	isResult := func(m *protocol.Message) bool { return m.Kind == protocol.KindResult && m.CommandID == "c1" }
	res := w.await(t, 5*time.Second, "result", isResult)
	if !res.Sent.Equal(fake.Now()) {
		t.Fatalf("result sent at %s; want the clock's %s", res.Sent, fake.Now())
	}
	if n := w.count(isResult); n != 1 {
		t.Fatalf("%d copies of the result before the clock moved; want 1", n)
	}
	fake.Advance(10 * time.Second)
	w.await(t, 5*time.Second, "resent result", func(*protocol.Message) bool { return w.count(isResult) >= 2 })
}
