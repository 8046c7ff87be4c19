package mqttlink_test

import (
	"context"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/mqttlink"
)

// A link given only a redirecting broker (a cluster's follower) follows
// its Server Reference to the broker it names, and messages flow there.
func TestFollowsServerReference(t *testing.T) {
	t.Parallel()
	leader := startBroker(t, freeAddr(t))
	t.Cleanup(func() { leader.Close() })
	follower, err := mqttbroker.StartRedirect(mqttbroker.Config{Addr: freeAddr(t)}, func() string { return "mqtt://" + leader.Addr }, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follower.Close() })
	in := &inbox{}
	l := dial(t, mqttlink.Config{URL: "mqtt://" + follower.Addr, ClientID: "site-a", Username: "u", Subscriptions: []string{"t/#"}, Handler: in.handle})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := l.AwaitUp(ctx); err != nil {
		t.Fatalf("link given only the follower never came up (it did not follow the Server Reference): %v", err)
	}
	if err := leader.Publish(ctx, "t/x", []byte("hello"), false); err != nil {
		t.Fatal(err)
	}
	in.await(t, "t/x=hello", 30*time.Second)
	if moved, _ := follower.Redirected(); moved < 1 {
		t.Errorf("the follower counted %d redirected CONNECTs, want at least 1", moved)
	}
	if n := l.Followed(); n < 1 {
		t.Errorf("the link counted %d followed references, want at least 1", n)
	}
}

// A reference to plain MQTT from a TLS URL is not followed (no downgrade)
// and neither is one that is no MQTT URL: the link stays down.
func TestServerReferenceNoDowngrade(t *testing.T) {
	t.Parallel()
	leader := startBroker(t, freeAddr(t))
	t.Cleanup(func() { leader.Close() })
	follower, err := mqttbroker.StartRedirect(mqttbroker.Config{Addr: freeAddr(t)}, func() string { return "http://" + leader.Addr }, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follower.Close() })
	l := dial(t, mqttlink.Config{URL: "mqtt://" + follower.Addr, ClientID: "site-b", Username: "u"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := l.AwaitUp(ctx); err == nil {
		t.Fatal("the link followed a reference to http:// and came up")
	}
	if moved, _ := follower.Redirected(); moved < 1 {
		t.Fatalf("the follower was never asked (moved=%d): the test proves nothing", moved)
	}
	if n := l.Followed(); n != 0 {
		t.Errorf("the link followed %d references to http://, want 0", n)
	}
}
