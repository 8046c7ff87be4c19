package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// wan is a fake WAN link that records what arrives, by node and offset.
type wan struct {
	mu   sync.Mutex
	down atomic.Bool
	got  map[string][]byte
}

func (w *wan) publish(_ context.Context, topic string, b []byte) error {
	if w.down.Load() {
		return errors.New("not connected")
	}
	m, err := protocol.Decode(b)
	if err != nil {
		return err
	}
	if topic != protocol.ConsoleEvtTopic("s1") {
		return errors.New("wrong topic " + topic)
	}
	out, err := protocol.InflateConsole(m.Console.Output)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	have := w.got[m.Node]
	if m.Console.Offset <= uint64(len(have)) {
		skip := uint64(len(have)) - m.Console.Offset
		if skip < uint64(len(out)) {
			w.got[m.Node] = append(have, out[skip:]...)
		}
	}
	return nil
}

func (w *wan) text(node string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.got[node])
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

type memStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memStore) PutConsole(node string, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b == nil {
		delete(s.m, node)
	} else {
		s.m[node] = b
	}
}
func (s *memStore) LoadConsoles() (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range s.m {
		out[k] = v
	}
	return out, nil
}

func TestSimConsoleThroughManager(t *testing.T) {
	w := &wan{got: map[string][]byte{}}
	st := &memStore{m: map[string][]byte{}}
	m, err := New(Config{Site: "s1", Publish: w.publish, Store: st, Dialers: map[string]Dialer{"fake": SimDialer{LineDelay: time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	m.Handle(&protocol.Message{Kind: protocol.KindConsole, Action: protocol.ConsoleEnable, Node: "n1", Driver: "fake"})
	waitFor(t, "boot log and login prompt", func() bool {
		s := w.text("n1")
		return strings.Contains(s, "Linux version") && strings.HasSuffix(s, "n1 login: ")
	})
	m.Handle(&protocol.Message{Kind: protocol.KindConsole, Action: protocol.ConsoleInput, Node: "n1", Console: &protocol.ConsoleData{Input: []byte("root\r")}})
	waitFor(t, "echo and password prompt", func() bool { return strings.HasSuffix(w.text("n1"), "login: root\r\nPassword: ") })
	m.Handle(&protocol.Message{Kind: protocol.KindConsole, Action: protocol.ConsoleInput, Node: "n1", Console: &protocol.ConsoleData{Input: []byte("x\rticks 5\r")}})
	waitFor(t, "shell prompt", func() bool { return strings.Contains(w.text("n1"), "root@n1:~# ticks 5") })
	// The WAN goes down while the console prints: the output is kept
	// and sent once it is back.
	w.down.Store(true)
	waitFor(t, "ticks kept at the site", func() bool {
		k, _ := m.Kept("n1")
		return bytes.Contains(k, []byte("tick 5 of 5"))
	})
	if strings.Contains(w.text("n1"), "tick 5 of 5") {
		t.Fatal("output crossed a WAN that was down")
	}
	waitFor(t, "the kept output in the store", func() bool {
		b, _ := st.LoadConsoles()
		var k kept
		return json.Unmarshal(b["n1"], &k) == nil && bytes.Contains(k.Data, []byte("tick 5 of 5"))
	})
	w.down.Store(false)
	waitFor(t, "the ticks after the WAN returned", func() bool {
		return strings.Contains(w.text("n1"), "tick 1 of 5\r\ntick 2 of 5") && strings.Contains(w.text("n1"), "tick 5 of 5")
	})
	m.Handle(&protocol.Message{Kind: protocol.KindConsole, Action: protocol.ConsoleDisable, Node: "n1"})
	waitFor(t, "session closed", func() bool { m.mu.Lock(); defer m.mu.Unlock(); return len(m.sessions) == 0 })
}

func TestKeepBounded(t *testing.T) {
	m, err := New(Config{Site: "s1", Keep: MinKeep, Publish: func(context.Context, string, []byte) error { return errors.New("down") }})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		m.append("n1", bytes.Repeat([]byte{'a' + byte(i%26)}, 1000))
	}
	k, end := m.Kept("n1")
	if len(k) != MinKeep || end != 100000 || k[len(k)-1] != 'a'+99%26 {
		t.Fatalf("kept %d bytes ending at %d, want the last %d of 100000", len(k), end, MinKeep)
	}
	if _, err := New(Config{Keep: 10}); err == nil {
		t.Fatal("a keep under the minimum was taken")
	}
}

func TestNoDialerIsAnError(t *testing.T) {
	w := &wan{got: map[string][]byte{}}
	var errs []string
	var mu sync.Mutex
	pub := func(ctx context.Context, topic string, b []byte) error {
		m, _ := protocol.Decode(b)
		mu.Lock()
		errs = append(errs, m.Console.Error)
		mu.Unlock()
		return w.publish(ctx, topic, b)
	}
	m, _ := New(Config{Site: "s1", Publish: pub})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	m.Handle(&protocol.Message{Kind: protocol.KindConsole, Action: protocol.ConsoleEnable, Node: "n1", Driver: "nosuch"})
	waitFor(t, "the error sent", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(errs) > 0 && strings.Contains(errs[0], "no console for driver nosuch")
	})
}

func TestTargetOf(t *testing.T) {
	tg := TargetOf("n", "ipmi", map[string]any{"ipmi_address": "10.0.0.1", "ipmi_username": "u", "ipmi_password": "p"})
	if tg.Address != "10.0.0.1" || tg.Username != "u" || tg.Password != "p" {
		t.Fatalf("%+v", tg)
	}
	tg = TargetOf("n", "idrac", map[string]any{"redfish_address": "https://x"})
	if tg.Address != "https://x" {
		t.Fatalf("%+v", tg)
	}
}

// TestManyConsolesOverASlowLink: 20 nodes' consoles print all the time
// and each publish takes a second (the broker's ack over a slow WAN).
// Every node's output arrives (none waits for the others forever), at
// most one chunk of a node is on the way at a time and at most
// MaxSending in all, and a key echoed on one node arrives in less time
// than one round trip per node would take (the chunks of different
// nodes are on the way together, not one after the other).
func TestManyConsolesOverASlowLink(t *testing.T) {
	const nodes, rtt = 20, time.Second
	w := &wan{got: map[string][]byte{}}
	var mu sync.Mutex
	onWay, perNode, most := 0, map[string]int{}, 0
	publish := func(ctx context.Context, topic string, b []byte) error {
		m, err := protocol.Decode(b)
		if err != nil {
			return err
		}
		mu.Lock()
		onWay++
		perNode[m.Node]++
		most = max(most, onWay)
		if perNode[m.Node] > 1 {
			t.Errorf("two chunks of node %s on the way at once", m.Node)
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			onWay--
			perNode[m.Node]--
			mu.Unlock()
		}()
		select {
		case <-time.After(rtt):
		case <-ctx.Done():
			return ctx.Err()
		}
		return w.publish(ctx, topic, b)
	}
	m, name := printingConsoles(t, nodes, w, publish)
	// The key goes on a node in the middle of the order.
	start := time.Now()
	m.append(name(nodes/2+1), []byte("KEY"))
	waitFor(t, "the echoed key", func() bool { return strings.Contains(w.text(name(nodes/2+1)), "KEY") })
	if took := time.Since(start); took >= nodes*rtt/2 {
		t.Errorf("the key took %s to arrive: about one %s round trip per node's chunk before it", took, rtt)
	}
	mu.Lock()
	defer mu.Unlock()
	if most > MaxSending || most < 2 {
		t.Errorf("at most %d chunks were on the way at once, want 2 to %d", most, MaxSending)
	}
}

// TestTypedConsoleFirst: with more consoles printing than chunks may be on
// the way at once, the echo of a console being typed into goes before the
// round robin of the others: it arrives within about two round trips
// (its node's chunk already on the way, then its own), where its turn in
// the round robin would come after every other node's chunk.
func TestTypedConsoleFirst(t *testing.T) {
	const nodes, rtt = 8 * MaxSending, 300 * time.Millisecond
	w := &wan{got: map[string][]byte{}}
	publish := func(ctx context.Context, topic string, b []byte) error {
		select {
		case <-time.After(rtt):
		case <-ctx.Done():
			return ctx.Err()
		}
		return w.publish(ctx, topic, b)
	}
	m, name := printingConsoles(t, nodes, w, publish)
	key := name(nodes / 2)
	m.noteTyped(key)
	start := time.Now()
	m.append(key, []byte("KEY"))
	waitFor(t, "the echoed key", func() bool { return strings.Contains(w.text(key), "KEY") })
	if took := time.Since(start); took > 4*rtt {
		t.Errorf("the typed console's echo took %s, over four %s round trips: it waited for the round robin (%d consoles, %d on the way at once)", took, rtt, nodes, MaxSending)
	} else {
		t.Logf("the typed console's echo took %s (round trip %s)", took, rtt)
	}
}

// printingConsoles runs a Manager that publishes through publish (into w)
// with nodes consoles printing a line every 20 ms until the test ends,
// and returns once w has output of every node; name(i) is node i's name
// (in sorted order).
func printingConsoles(t *testing.T, nodes int, w *wan, publish func(context.Context, string, []byte) error) (*Manager, func(int) string) {
	t.Helper()
	m, err := New(Config{Site: "s1", Publish: publish})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go m.Run(ctx)
	name := func(i int) string { return fmt.Sprintf("node-%03d", i) }
	for i := range nodes {
		go func() {
			for ctx.Err() == nil {
				m.append(name(i), []byte("tick\r\n"))
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	waitFor(t, "output of every node", func() bool {
		for i := range nodes {
			if !strings.Contains(w.text(name(i)), "tick") {
				return false
			}
		}
		return true
	})
	return m, name
}
