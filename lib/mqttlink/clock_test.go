package mqttlink_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/lib/waitfor"
)

// countingWriter counts the log lines that name a failed subscription.
type countingWriter struct{ n atomic.Int32 }

func (w *countingWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "mqtt subscribe failed") {
		w.n.Add(1)
	}
	return len(p), nil
}

// TestRefusedSubscriptionRetriesOnTheClock: a link whose subscription
// the broker refuses tries again when its clock says so, not before: a
// fake clock holds the retry until it moves. The link is not up while
// its subscription is refused.
func TestRefusedSubscriptionRetriesOnTheClock(t *testing.T) {
	addr := freeAddr(t)
	b := startBroker(t, addr)
	defer b.Close()
	fake := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	w := &countingWriter{}
	l, err := mqttlink.Dial(context.Background(), mqttlink.Config{URL: "mqtt://" + addr, ClientID: "limited", Username: "limited", Password: "pw",
		Subscriptions: []string{"x/#"}, Clock: fake, Logger: slog.New(slog.NewTextHandler(w, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !waitfor.Until(10*time.Second, func() bool { return w.n.Load() >= 1 }) {
		t.Fatal("the refused subscription was never reported")
	}
	if !fake.WaitTimers(1, 5*time.Second) {
		t.Fatal("the retry is not on the link's clock")
	}
	// The real retry interval is 200ms: held by the fake, nothing comes.
	if waitfor.Until(500*time.Millisecond, func() bool { return w.n.Load() >= 2 }) {
		t.Fatal("the link retried before its clock moved")
	}
	fake.Advance(200 * time.Millisecond)
	if !waitfor.Until(10*time.Second, func() bool { return w.n.Load() >= 2 }) {
		t.Fatal("the link did not retry once its clock passed the retry")
	}
	if l.Up() {
		t.Fatal("a link whose subscription is refused says it is up")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l.AwaitUp(ctx); err == nil {
		t.Fatal("AwaitUp returned for a link that is not up")
	}
}
