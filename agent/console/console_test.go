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

	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// wan is a fake WAN link that records what arrives, by node and offset,
// put in order as the coordinator does: a chunk past a gap waits for it;
// bytes a chunk says are lost are '?'.
type wan struct {
	mu      sync.Mutex
	down    atomic.Bool
	got     map[string][]byte
	pending map[string][]*protocol.ConsoleData // inflated Output
	behind  atomic.Int64                       // chunks that came past a gap
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
	if w.pending == nil {
		w.pending = map[string][]*protocol.ConsoleData{}
	}
	c := *m.Console
	c.Output = out
	w.pending[m.Node] = append(w.pending[m.Node], &c)
	for again := true; again; {
		again = false
		rest := w.pending[m.Node][:0]
		for _, c := range w.pending[m.Node] {
			have := w.got[m.Node]
			switch {
			case c.Offset <= uint64(len(have)):
				if skip := uint64(len(have)) - c.Offset; skip < uint64(len(c.Output)) {
					w.got[m.Node] = append(have, c.Output[skip:]...)
				}
				again = true
			case c.Offset-c.Lost <= uint64(len(have)):
				have = append(have, bytes.Repeat([]byte("?"), int(c.Offset)-len(have))...)
				w.got[m.Node] = append(have, c.Output...)
				again = true
			default:
				if c == w.pending[m.Node][len(w.pending[m.Node])-1] {
					w.behind.Add(1) // the one just come
				}
				rest = append(rest, c)
			}
		}
		w.pending[m.Node] = rest
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
// most NodeWindow chunks of a node are on the way at a time and at most
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
		if perNode[m.Node] > NodeWindow {
			t.Errorf("%d chunks of node %s on the way at once, over NodeWindow", perNode[m.Node], m.Node)
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
	m, ctx := runManager(t, publish)
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

// gated is a WAN link whose chunks arrive when published and whose acks
// come only when the test lets them (ack): the count of acks a chunk
// waited for is exact, whatever the machine's speed.
type gated struct {
	w     *wan
	mu    sync.Mutex
	onWay map[string]int // publishes not returned, by node
	most  map[string]int
	acks  int
	gate  chan struct{}
	sent  []*protocol.Message
}

func newGated() *gated {
	return &gated{w: &wan{got: map[string][]byte{}}, onWay: map[string]int{}, most: map[string]int{}, gate: make(chan struct{})}
}

func (g *gated) publish(ctx context.Context, topic string, b []byte) error {
	m, err := protocol.Decode(b)
	if err != nil {
		return err
	}
	if err := g.w.publish(ctx, topic, b); err != nil {
		return err
	}
	g.mu.Lock()
	g.sent = append(g.sent, m)
	g.onWay[m.Node]++
	g.most[m.Node] = max(g.most[m.Node], g.onWay[m.Node])
	gate := g.gate
	g.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.mu.Lock()
	g.onWay[m.Node]--
	g.acks++
	g.mu.Unlock()
	return nil
}

// ack lets every publish on the way return.
func (g *gated) ack() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.gate)
	g.gate = make(chan struct{})
}

func (g *gated) count(f func() int) int { g.mu.Lock(); defer g.mu.Unlock(); return f() }

// onWayAll is how many chunks of every node are on the way.
func (g *gated) onWayAll() int {
	return g.count(func() int {
		n := 0
		for _, c := range g.onWay {
			n += c
		}
		return n
	})
}

// settled waits until the chunks on the way (more than none) stop
// changing: the printing consoles have taken what the window gives
// them. seen, when set, is told every count on the way.
func (g *gated) settled(t *testing.T, what string, seen func(int)) int {
	t.Helper()
	last, same := -1, 0
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		n := g.onWayAll()
		if seen != nil {
			seen(n)
		}
		if n == last && n > 0 {
			if same++; same == 20 {
				return n
			}
		} else {
			last, same = n, 0
		}
	}
	t.Fatalf("timed out waiting for %s", what)
	return 0
}

// TestEchoDoesNotWaitForAck: a node's previous chunk awaits its ack (the
// broker's, a WAN round trip) when a key's echo is printed: the echo is
// published at once and arrives without waiting for that ack, so the
// keystroke's round trip is one WAN round trip, not two. A node that
// prints while no ack comes has at most NodeWindow chunks on the way,
// TypedWindow while typed into; everything arrives in order once the
// acks come.
func TestEchoDoesNotWaitForAck(t *testing.T) {
	g := newGated()
	m, err := New(Config{Site: "s1", Publish: g.publish})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go m.Run(ctx)
	m.append("n1", []byte("login: "))
	waitFor(t, "the prompt", func() bool { return g.w.text("n1") == "login: " })
	m.noteTyped("n1")
	m.append("n1", []byte("r"))
	waitFor(t, "the echo, with no ack", func() bool { return g.w.text("n1") == "login: r" })
	if acks := g.count(func() int { return g.acks }); acks != 0 {
		t.Fatalf("the echo came after %d acks, want 0 (it waited for its node's previous chunk)", acks)
	}
	// The node prints on without acks: at most TypedWindow on the way.
	for i := range 3 * TypedWindow {
		m.append("n1", []byte{'a' + byte(i%26)})
		time.Sleep(time.Millisecond)
	}
	waitFor(t, "the typed console's window full", func() bool { return g.count(func() int { return g.onWay["n1"] }) == TypedWindow })
	// An untyped node: at most NodeWindow.
	for i := range 3 * NodeWindow {
		m.append("n2", []byte{'a' + byte(i%26)})
		time.Sleep(time.Millisecond)
	}
	waitFor(t, "the other console's window full", func() bool { return g.count(func() int { return g.onWay["n2"] }) == NodeWindow })
	// The acks come: everything arrives, in order, and Sent reaches the end.
	want1 := "login: r"
	for i := range 3 * TypedWindow {
		want1 += string(rune('a' + i%26))
	}
	want2 := ""
	for i := range 3 * NodeWindow {
		want2 += string(rune('a' + i%26))
	}
	waitFor(t, "all output acked", func() bool {
		g.ack()
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.kept["n1"].Sent == m.kept["n1"].End && m.kept["n2"].Sent == m.kept["n2"].End
	})
	if g.w.text("n1") != want1 || g.w.text("n2") != want2 {
		t.Fatalf("arrived %q and %q, want %q and %q", g.w.text("n1"), g.w.text("n2"), want1, want2)
	}
	// The most ever on the way at once, over the whole output (three
	// windows' worth, the window refilled after each round of acks).
	if n1, n2 := g.count(func() int { return g.most["n1"] }), g.count(func() int { return g.most["n2"] }); n1 != TypedWindow || n2 != NodeWindow {
		t.Fatalf("at most %d and %d chunks on the way, want %d (typed) and %d", n1, n2, TypedWindow, NodeWindow)
	}
}

// TestEchoOverA300msLink: a typed console prints a line every 100 ms
// over a link whose acks take 300 ms, so a chunk of it is always on the
// way; a key's echo is published before the chunks on the way when it
// was printed have all been acked (before this pipeline it waited for
// them: one more round trip).
func TestEchoOverA300msLink(t *testing.T) {
	const rtt = 300 * time.Millisecond
	w := &wan{got: map[string][]byte{}}
	var mu sync.Mutex
	onWay := map[string]bool{} // message IDs of n1 on the way
	var atKey map[string]bool  // those on the way when the echo was printed
	waited := -1               // how many of atKey had returned when the echo went
	publish := func(ctx context.Context, topic string, b []byte) error {
		m, err := protocol.Decode(b)
		if err != nil {
			return err
		}
		out, _ := protocol.InflateConsole(m.Console.Output)
		mu.Lock()
		if atKey != nil && waited < 0 && bytes.Contains(out, []byte("KEY")) {
			waited = 0
			for id := range atKey {
				if !onWay[id] {
					waited++
				}
			}
		}
		onWay[m.ID] = true
		mu.Unlock()
		if err := w.publish(ctx, topic, b); err != nil {
			return err
		}
		select {
		case <-time.After(rtt):
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		delete(onWay, m.ID)
		mu.Unlock()
		return nil
	}
	m, ctx := runManager(t, publish)
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			m.append("n1", []byte(fmt.Sprintf("tick %d\r\n", i)))
			time.Sleep(100 * time.Millisecond)
		}
	}()
	m.noteTyped("n1")
	waitFor(t, "a chunk on the way", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(onWay) > 0 && strings.Contains(w.text("n1"), "tick 3")
	})
	mu.Lock()
	atKey = map[string]bool{}
	for id := range onWay {
		atKey[id] = true
	}
	on := len(atKey)
	start := time.Now()
	m.append("n1", []byte("KEY")) // the echo, printed while atKey are on the way
	mu.Unlock()
	waitFor(t, "the echo", func() bool { return strings.Contains(w.text("n1"), "KEY") })
	took := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if waited >= on {
		t.Fatalf("the echo went after all %d chunks on the way were acked: it waited for their round trip", on)
	}
	t.Logf("the echo arrived after %s (link round trip %s); %d of the %d chunks on the way had been acked when it went", took, rtt, waited, on)
}

// TestPipelineResendsInOrder: publishes fail now and then while the
// consoles print (a WAN that drops), each after a later chunk of its
// node got through: a node whose chunk failed sends again from the first
// byte not acked, the chunks after it too, and what arrives is every
// byte printed, in order, none lost.
func TestPipelineResendsInOrder(t *testing.T) {
	w := &wan{got: map[string][]byte{}}
	var calls, failed atomic.Int64
	var mu sync.Mutex
	perNode := map[string]int{}
	publish := func(ctx context.Context, topic string, b []byte) error {
		m, _ := protocol.Decode(b)
		mu.Lock()
		perNode[m.Node]++
		mine := perNode[m.Node]
		mu.Unlock()
		if n := calls.Add(1); n%3 == 0 && failed.Load() < 6 {
			failed.Add(1)
			// It fails once a later chunk of its node went (or after 2 s).
			for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
				mu.Lock()
				later := perNode[m.Node] > mine
				mu.Unlock()
				if later {
					break
				}
			}
			return errors.New("link dropped")
		}
		if err := w.publish(ctx, topic, b); err != nil {
			return err
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	m, _ := runManager(t, publish)
	want := map[string]string{}
	for i := range 100 {
		for _, n := range []string{"n1", "n2"} {
			line := fmt.Sprintf("%s line %d\r\n", n, i)
			want[n] += line
			m.append(n, []byte(line))
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, "every line", func() bool { return w.text("n1") == want["n1"] && w.text("n2") == want["n2"] })
	if failed.Load() < 3 || w.behind.Load() == 0 {
		t.Fatalf("%d publishes failed, %d chunks came past a gap: the test did not do what it means to", failed.Load(), w.behind.Load())
	}
	t.Logf("%d publishes, %d failed; %d chunks came past a gap and waited", calls.Load(), failed.Load(), w.behind.Load())
}

// TestLostSaysWhat: output dropped past the bound before it could go is
// sent with Lost covering it; a replay's first chunk has Lost = Offset.
func TestLostSaysWhat(t *testing.T) {
	var mu sync.Mutex
	var sent []protocol.ConsoleData
	w := &wan{got: map[string][]byte{}}
	w.down.Store(true)
	publish := func(ctx context.Context, topic string, b []byte) error {
		if err := w.publish(ctx, topic, b); err != nil {
			return err
		}
		m, _ := protocol.Decode(b)
		mu.Lock()
		sent = append(sent, *m.Console)
		mu.Unlock()
		return nil
	}
	m, err := New(Config{Site: "s1", Keep: MinKeep, Publish: publish})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go m.Run(ctx)
	m.append("n1", bytes.Repeat([]byte("x"), 3*MinKeep))
	m.append("n1", []byte("END"))
	w.down.Store(false)
	m.poke()
	total := uint64(3*MinKeep + 3)
	waitFor(t, "the kept output", func() bool { return strings.HasSuffix(w.text("n1"), "END") })
	mu.Lock()
	first := sent[0]
	mu.Unlock()
	if first.Offset != total-MinKeep || first.Lost != first.Offset {
		t.Fatalf("first chunk at %d with %d lost, want %d and %d", first.Offset, first.Lost, total-MinKeep, total-MinKeep)
	}
	if got := w.text("n1"); got != strings.Repeat("?", int(total-MinKeep))+strings.Repeat("x", MinKeep-3)+"END" {
		t.Fatalf("arrived %d bytes", len(got))
	}
	mu.Lock()
	sent = nil
	mu.Unlock()
	m.Handle(&protocol.Message{Kind: protocol.KindConsole, Action: protocol.ConsoleReplay, Node: "n1"})
	waitFor(t, "the replay", func() bool { mu.Lock(); defer mu.Unlock(); return len(sent) > 0 })
	mu.Lock()
	defer mu.Unlock()
	if sent[0].Offset != total-MinKeep || sent[0].Lost != sent[0].Offset {
		t.Fatalf("replay's first chunk at %d with %d lost, want Lost = Offset = %d", sent[0].Offset, sent[0].Lost, total-MinKeep)
	}
}

// runManager starts a console manager of site s1 that publishes with
// publish, until the test ends; its context is the one Run was given.
func runManager(t *testing.T, publish func(ctx context.Context, topic string, payload []byte) error) (*Manager, context.Context) {
	t.Helper()
	m, err := New(Config{Site: "s1", Publish: publish})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go m.Run(ctx)
	return m, ctx
}

// TestTypedEchoNotBehindPrintingConsoles: 100 consoles print without
// pause, so the printing consoles alone would keep the site's window of
// chunks on the way full; one more console is typed into. Acks come in
// rounds, all at once, as over a WAN whose chunks were sent together
// (each round is one round trip); each key comes just after a round of
// acks, when the printing consoles have filled the window again (the
// keystroke's phase in make bench-console: the next key reaches the site
// when the previous echo's round trip, and those of the chunks sent with
// it, ends). Every echo must arrive with no further ack: one round trip
// for the keystroke, never a second one behind the printing consoles'
// chunks. The site's bound of chunks on the way holds throughout.
func TestTypedEchoNotBehindPrintingConsoles(t *testing.T) {
	const printing, keys = 100, 6
	g := newGated()
	m, _ := runManager(t, g.publish)
	name := func(i int) string { return fmt.Sprintf("node-%03d", i+1) }
	const typed = "node-000"
	m.append(typed, []byte("login: "))
	most := 0
	settled := func(what string) int { return g.settled(t, what, func(n int) { most = max(most, n) }) }
	print := func(round int) {
		for i := range printing {
			m.append(name(i), []byte(fmt.Sprintf("tick %d\r\n", round)))
		}
	}
	print(0)
	settled("the printing consoles' first chunks")
	want := "login: "
	for key := range keys {
		// A round trip: every chunk on the way is acked; the printing
		// consoles print on and take the window again.
		print(key + 1)
		g.ack()
		full := settled("the window taken again")
		if full < MaxSending/2 {
			t.Fatalf("only %d chunks on the way after the printing consoles took their turns: the test does not fill the window", full)
		}
		if full > MaxSending-TypedReserve {
			t.Fatalf("%d chunks of the printing consoles on the way, over MaxSending - TypedReserve (%d)", full, MaxSending-TypedReserve)
		}
		acks := g.count(func() int { return g.acks })
		k := string(rune('a' + key))
		m.Handle(&protocol.Message{Kind: protocol.KindConsole, Action: protocol.ConsoleInput, Node: typed, Console: &protocol.ConsoleData{Input: []byte(k)}})
		m.append(typed, []byte(k)) // the echo
		want += k
		arrived := func() bool { return g.w.text(typed) == want }
		// The echo goes within milliseconds when it goes at once; 2 s
		// stays within typedFirst of the key.
		for end := time.Now().Add(2 * time.Second); !arrived() && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		}
		if !arrived() {
			// Count the round trips it takes.
			trips := 1
			for ; !arrived() && trips < 10; trips++ {
				g.ack()
				for end := time.Now().Add(5 * time.Second); !arrived() && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
				}
			}
			t.Fatalf("key %d (%d chunks of the printing consoles on the way): its echo was not sent until %d more round trips of acks (%d acks): it waited behind the printing consoles' chunks",
				key, full, trips-1, g.count(func() int { return g.acks })-acks)
		}
		if n := g.count(func() int { return g.acks }) - acks; n != 0 {
			t.Fatalf("key %d: the echo arrived after %d more acks, want none", key, n)
		}
		t.Logf("key %d: echoed with no further ack, %d chunks of the printing consoles on the way", key, full)
	}
	if most > MaxSending {
		t.Fatalf("%d chunks on the way at once, over MaxSending %d", most, MaxSending)
	}
}

// TestSmallBandwidthSendsLargeOutput: at the lowest bandwidth the site
// takes (MinBandwidth bytes a second, less than a full chunk) output
// longer than a second's worth still goes, in chunks a second's tokens
// hold.
func TestSmallBandwidthSendsLargeOutput(t *testing.T) {
	w := &wan{got: map[string][]byte{}}
	m, err := New(Config{Site: "s1", Bandwidth: MinBandwidth, Publish: w.publish})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go m.Run(ctx)
	out := strings.Repeat("0123456789abcdef", MinBandwidth*3/2/16)
	m.append("n1", []byte(out))
	waitFor(t, "the output, 1.5 s of the bandwidth", func() bool { return w.text("n1") == out })
}

// TestTypedEchoNotBehindBandwidthWait: a console prints more than the
// site's bandwidth carries, so the next chunk due always waits for its
// share of the bandwidth (a second's worth of tokens at MinBandwidth);
// a key typed on another console just after the printing console's
// chunk went has its echo (a few bytes, which go first) sent at once,
// not after the printing console's wait.
func TestTypedEchoNotBehindBandwidthWait(t *testing.T) {
	w := &wan{got: map[string][]byte{}}
	var mu sync.Mutex
	var printed int
	var echoAt time.Time
	publish := func(ctx context.Context, topic string, b []byte) error {
		m, err := protocol.Decode(b)
		if err != nil {
			return err
		}
		mu.Lock()
		if m.Node == "n1" {
			printed++
		} else if echoAt.IsZero() {
			echoAt = time.Now()
		}
		mu.Unlock()
		return w.publish(ctx, topic, b)
	}
	m, err := New(Config{Site: "s1", Bandwidth: MinBandwidth, Publish: publish})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go m.Run(ctx)
	m.append("n1", bytes.Repeat([]byte("x"), DefaultKeep))
	// The tokens at the start are spent; the printing console's second
	// chunk went and its third waits a second for the bandwidth.
	waitFor(t, "the printing console's second chunk", func() bool { mu.Lock(); defer mu.Unlock(); return printed == 2 })
	start := time.Now()
	m.noteTyped("n2")
	m.append("n2", []byte("k"))
	waitFor(t, "the echo", func() bool { mu.Lock(); defer mu.Unlock(); return !echoAt.IsZero() })
	mu.Lock()
	took, during := echoAt.Sub(start), printed
	mu.Unlock()
	// The echo went ahead of the printing console's third chunk, which
	// waits a second for the bandwidth (no bound on the machine's speed).
	if during != 2 {
		t.Fatalf("the echo went %s after the key, after %d chunks of the printing console (want 2): it waited for the printing console's share of the bandwidth (a chunk a second)", took, during)
	}
	t.Logf("the echo went %s after the key", took)
}

// TestPrintingConsolesYieldToResults: while results are on the way
// (Config.Yield), 100 printing consoles keep at most YieldUntyped chunks
// on the way, and go on printing (a round of acks lets the next ones
// go); a console typed into is not held back; once no result is on the
// way the printing consoles take their share of the window again.
func TestPrintingConsolesYieldToResults(t *testing.T) {
	const printing = 100
	g := newGated()
	var yield atomic.Bool
	yield.Store(true)
	m, err := New(Config{Site: "s1", Publish: g.publish, Yield: yield.Load})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go m.Run(ctx)
	settled := func(what string) int { return g.settled(t, what, nil) }
	print := func(round int) {
		for i := range printing {
			m.append(fmt.Sprintf("node-%03d", i+1), []byte(fmt.Sprintf("tick %d\r\n", round)))
		}
	}
	print(0)
	for round := 1; round <= 3; round++ {
		if n := settled("the printing consoles' chunks"); n > YieldUntyped {
			t.Fatalf("round %d: %d chunks of the printing consoles on the way while results are, over YieldUntyped (%d)", round, n, YieldUntyped)
		}
		print(round)
		g.ack()
	}
	// A key on another console: its echo goes at once, results or not.
	m.Handle(&protocol.Message{Kind: protocol.KindConsole, Action: protocol.ConsoleInput, Node: "node-000", Console: &protocol.ConsoleData{Input: []byte("k")}})
	m.append("node-000", []byte("k"))
	if !waitfor.Until(2*time.Second, func() bool { return g.w.text("node-000") == "k" }) {
		t.Fatal("the typed console's echo was held back behind results on the way")
	}
	// No result on the way: the printing consoles fill their share.
	yield.Store(false)
	g.ack()
	if n := settled("the window taken again"); n <= YieldUntyped+1 || n > MaxSending-TypedReserve+1 {
		t.Fatalf("%d chunks on the way with no result on the way; want more than %d, at most %d", n, YieldUntyped+1, MaxSending-TypedReserve+1)
	}
}

// TestTypedBeforeAnyOutput: a key typed into a console that has printed
// nothing yet keeps the console's place ahead of the printing consoles
// when the send loop looks before the echo comes (it used to drop the
// mark of a console with no output kept, and the echo then waited behind
// the printing consoles' share; seen in TestPrintingConsolesYieldToResults
// on a busy machine).
func TestTypedBeforeAnyOutput(t *testing.T) {
	g := newGated()
	m, err := New(Config{Site: "s1", Publish: g.publish, Yield: func() bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	m.noteTyped("n1")
	if _, _, _, _, _, _, ok := m.next(float64(m.cfg.Bandwidth), true); ok {
		t.Fatal("a chunk is due before any output")
	}
	m.append("n1", []byte("k"))
	m.mu.Lock()
	m.sendingUntyped = YieldUntyped // the printing consoles' share is taken
	m.mu.Unlock()
	node, _, _, _, _, _, ok := m.next(float64(m.cfg.Bandwidth), true)
	if !ok || node != "n1" {
		t.Fatalf("next after the echo: %q (due %v), want n1's echo ahead of the printing consoles' full share", node, ok)
	}
}
