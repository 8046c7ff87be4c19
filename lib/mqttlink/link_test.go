package mqttlink_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/freeport"
	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/lib/waitfor"
)

// creds lets everyone in; user "limited" may only use topics under t/.
type creds struct{}

func (creds) Authenticate(user, password, clientID string) error {
	if password != "pw" {
		return errors.New("wrong password")
	}
	return nil
}

func (creds) Prefix(user string) (string, bool) {
	if user == "limited" {
		return "t/", true
	}
	return "", true
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type testWriter struct{}

func (testWriter) Write(p []byte) (int, error) { return len(p), nil }

func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// inbox collects what a link receives.
type inbox struct {
	mu  sync.Mutex
	got []string
}

func (in *inbox) handle(topic string, payload []byte) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.got = append(in.got, topic+"="+string(payload))
}

func (in *inbox) await(t *testing.T, want string, d time.Duration) {
	t.Helper()
	if waitfor.Until(d, func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		return slices.Contains(in.got, want)
	}) {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	t.Fatalf("never received %q; got %v", want, in.got)
}

func dial(t *testing.T, cfg mqttlink.Config) *mqttlink.Link {
	t.Helper()
	cfg.Password, cfg.Logger = "pw", quiet()
	l, err := mqttlink.Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

func startBroker(t *testing.T, addr string) *mqttbroker.Broker {
	t.Helper()
	var b *mqttbroker.Broker
	var err error
	// The port of a broker just closed may take a moment to be free.
	if waitfor.Until(5*time.Second, func() bool {
		b, err = mqttbroker.Start(mqttbroker.Config{Addr: addr}, creds{}, quiet(), nil)
		return err == nil
	}) {
		return b
	}
	t.Fatal(err)
	return nil
}

// Messages flow, retained presence reaches later subscribers, and after
// the broker restarts (losing every session) the link connects again,
// subscribes again and announces itself again on its own.
func TestReconnectResubscribesAndAnnounces(t *testing.T) {
	addr := freeAddr(t)
	b := startBroker(t, addr)
	url := "mqtt://" + addr
	var a, obs inbox
	la := dial(t, mqttlink.Config{URL: url, ClientID: "a", Username: "a", Subscriptions: []string{"t/#"}, Handler: a.handle,
		OnlineTopic: "p/a/presence", OnlinePayload: []byte("online"), WillTopic: "p/a/presence", WillPayload: []byte("offline"), SessionExpiry: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := la.AwaitUp(ctx); err != nil {
		t.Fatal(err)
	}
	lo := dial(t, mqttlink.Config{URL: url, ClientID: "obs", Username: "obs", Subscriptions: []string{"p/#"}, Handler: obs.handle})
	if err := lo.AwaitUp(ctx); err != nil {
		t.Fatal(err)
	}
	obs.await(t, "p/a/presence=online", 5*time.Second) // retained, published before obs subscribed
	if err := lo.Publish(ctx, "t/1", []byte("one"), false); err != nil {
		t.Fatal(err)
	}
	a.await(t, "t/1=one", 5*time.Second)

	b.Close()
	if !waitfor.Until(5*time.Second, func() bool { return !la.Up() }) {
		t.Fatal("the link still says it is up with the broker gone")
	}
	b = startBroker(t, addr)
	defer b.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := la.AwaitUp(ctx2); err != nil {
		t.Fatal(err)
	}
	if err := lo.AwaitUp(ctx2); err != nil {
		t.Fatal(err)
	}
	if err := lo.Publish(ctx2, "t/2", []byte("two"), false); err != nil {
		t.Fatal(err)
	}
	a.await(t, "t/2=two", 10*time.Second)
	// The new broker knew nothing of a's presence: a announced it again.
	var late inbox
	ll := dial(t, mqttlink.Config{URL: url, ClientID: "late", Username: "late", Subscriptions: []string{"p/#"}, Handler: late.handle})
	if err := ll.AwaitUp(ctx2); err != nil {
		t.Fatal(err)
	}
	late.await(t, "p/a/presence=online", 5*time.Second)
}

// A subscription the broker refuses is an error that names the filter.
func TestRefusedSubscription(t *testing.T) {
	addr := freeAddr(t)
	b := startBroker(t, addr)
	defer b.Close()
	l := dial(t, mqttlink.Config{URL: "mqtt://" + addr, ClientID: "limited", Username: "limited", Subscriptions: []string{"t/#"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.AwaitUp(ctx); err != nil {
		t.Fatal(err)
	}
	err := l.Subscribe(ctx, "x/#")
	if err == nil || !strings.Contains(err.Error(), `"x/#"`) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("subscription outside the user's prefix: %v, want a refusal naming the filter", err)
	}
}

func TestDialRejectsBadURL(t *testing.T) {
	if _, err := mqttlink.Dial(context.Background(), mqttlink.Config{URL: "not a url", ClientID: "x", Logger: quiet()}); err == nil {
		t.Fatal("Dial accepted a URL without a host")
	}
}

// Several brokers separated by commas are each checked: one bad URL in
// the list is refused, naming it.
func TestDialRejectsBadURLInList(t *testing.T) {
	_, err := mqttlink.Dial(context.Background(), mqttlink.Config{URL: "mqtt://127.0.0.1:1,http://127.0.0.1:2", ClientID: "x", Logger: quiet()})
	if err == nil || !strings.Contains(err.Error(), "http://127.0.0.1:2") {
		t.Fatalf("a list with an http URL: %v, want a refusal naming it", err)
	}
}
