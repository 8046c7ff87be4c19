package mqttbroker

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/lib/waitfor"
)

func TestAllowed(t *testing.T) {
	p := "bm/v1/site/s1/node/n1/"
	for topic, want := range map[string]bool{
		"bm/v1/site/s1/node/n1/evt":  true,
		"bm/v1/site/s1/node/n1/#":    true,
		"bm/v1/site/s1/node/n2/evt":  false,
		"bm/v1/site/s1/node/n10/evt": false,
		"bm/v1/site/s1/node/+/cmd":   false,
		"bm/#":                       false,
		"#":                          false,
	} {
		if got := Allowed(p, topic); got != want {
			t.Errorf("Allowed(%q, %q) = %v, want %v", p, topic, got, want)
		}
	}
	if !Allowed("", "anything/at/all") {
		t.Error("empty prefix must allow everything")
	}
}

func TestQuietHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(quietHandler{Handler: slog.NewTextHandler(&buf, nil)}).With("component", "broker")
	log.Warn("error processing packet", "error", errors.New("boom"), "client", "c1",
		"pk", packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "bm/v1/x", Payload: []byte(`{"password":"hunter2"}`)})
	log.Warn("", "error", io.EOF)
	log.Warn("", "error", &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed})
	log.Warn("", "error", errors.New("accept: too many open files"))
	out := buf.String()
	if strings.Contains(out, "hunter2") {
		t.Fatalf("a payload reached the log: %s", out)
	}
	for _, want := range []string{"packet.type=Publish", "packet.topic=bm/v1/x", "boom", "too many open files"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q: %s", want, out)
		}
	}
	if strings.Contains(out, "EOF") || strings.Contains(out, "closed") {
		t.Errorf("a client's hang-up was logged above debug: %s", out)
	}
}

// testCreds admits user "site:s1" with password "pw" under client IDs
// starting with "edge-s1", on the prefix bm/v1/site/s1/, unless revoked.
type testCreds struct{ revoked *atomic.Bool }

func (c testCreds) Authenticate(user, password, clientID string) error {
	if user != "site:s1" || password != "pw" || !strings.HasPrefix(clientID, "edge-s1") || (c.revoked != nil && c.revoked.Load()) {
		return errors.New("no")
	}
	return nil
}

func (testCreds) Prefix(user string) (string, bool) {
	if user == "site:s1" {
		return "bm/v1/site/s1/", true
	}
	return "", false
}

// closedWithin tells whether the server closes c within d (a read ends).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b [64]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// TestHalfSentConnectClosed: a client that sends part of its CONNECT and
// stops is closed after connectTimeout, as one that sends nothing; past
// MaxPendingConnects such connections a new one is closed at once; once
// they are gone a whole CONNECT is answered (the control).
func TestHalfSentConnectClosed(t *testing.T) {
	old := connectTimeout
	connectTimeout = 500 * time.Millisecond
	defer func() { connectTimeout = old }()
	b, err := Start(Config{Addr: "127.0.0.1:0", MaxPendingConnects: 2}, testCreds{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	half := []byte{0x10, 0x80, 0x7d, 0x00, 0x04, 'M', 'Q', 'T', 'T'} // CONNECT of 16000 bytes, 9 sent
	var stalled []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", b.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(half)
		stalled = append(stalled, c)
	}
	// Both accepted and pending (no sleep: a busy machine takes its time).
	if !waitfor.Until(10*time.Second, func() bool { return b.ConnStats().Pending >= 2 }) {
		t.Fatalf("the two half-sent CONNECTs are not pending after 10 s: %+v", b.ConnStats())
	}
	// The third is refused at accept (reset; the dial itself may see it).
	if third, err := net.Dial("tcp", b.Addr); err == nil {
		defer third.Close()
		third.Write(half)
		if !closedWithin(third, 10*time.Second) {
			t.Error("a connection beyond MaxPendingConnects was not closed")
		}
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatal(err)
	}
	if st := b.ConnStats(); st.Refused[netbudget.RefusedPending] != 1 {
		t.Errorf("a connection beyond MaxPendingConnects was not refused at accept: %+v", st)
	}
	for i, c := range stalled {
		if !closedWithin(c, 10*time.Second) {
			t.Errorf("half-sent CONNECT %d still open 10 s after a connect timeout of 0.5 s", i)
		}
	}
	// The control: a whole CONNECT (MQTT v5, user site:s1) gets its CONNACK.
	c, code := connectS1(t, b.Addr, "edge-s1", nil)
	if c == nil {
		t.Fatalf("whole CONNECT after the stalled ones ended: reason 0x%02x; want 0", code)
	}
	defer c.Close()
	// Past the CONNECT the broker's keepalive rules, not the connect
	// timeout: the authenticated client stays connected.
	if closedWithin(c, time.Second) {
		t.Error("an authenticated client was closed by the connect timeout")
	}
}

// flakyListener fails its first accepts as a process out of file
// descriptors does.
type flakyListener struct {
	net.Listener
	fails int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestAcceptOutlivesFailures: accept errors such as "too many open
// files" make the listener wait and try again, not stop (mochi's own
// listener returns at the first error, and the broker stayed deaf).
func TestAcceptOutlivesFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := netbudget.NewPoolLimit(1<<16, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The broker's own listener stack (Start's), over a listener that
	// fails its first accepts.
	_, gl := listenerStack(&flakyListener{Listener: ln, fails: 5},
		Config{Name: "mqtt", Pool: pool, MaxConnectSize: 1 << 10, MaxPendingConnects: 4}, slog.New(slog.DiscardHandler))
	// The client holds its connection until the test is done with it.
	hold := make(chan struct{})
	defer close(hold)
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			<-hold
		}
	}()
	c, err := gl.Accept()
	if err != nil {
		t.Fatalf("Accept after 5 failures: %v; want the next connection", err)
	}
	c.Close()
	ln.Close()
	if _, err := gl.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on a closed listener: %v; want net.ErrClosed", err)
	}
}

// connectS1 connects a raw MQTT v5 client as site:s1, with a last will
// when will is set, and returns the connection once the CONNACK is read,
// or nil and the CONNACK's reason code when it is not 0.
func connectS1(t *testing.T, addr, clientID string, will func(*packets.ConnectParams)) (net.Conn, byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: clientID,
			UsernameFlag: true, PasswordFlag: true, Username: []byte("site:s1"), Password: []byte("pw")}}
	if will != nil {
		will(&pk.Connect)
	}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	c.Write(buf.Bytes())
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	ack := make([]byte, 4)
	if _, err := io.ReadFull(c, ack); err != nil || ack[0]>>4 != packets.Connack {
		t.Fatalf("CONNECT of %s: %x, %v", clientID, ack, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if ack[3] != 0 {
		c.Close()
		return nil, ack[3]
	}
	return c, 0
}

// connectWithWill is connectS1 with a last will on topic.
func connectWithWill(t *testing.T, addr, clientID, topic string, retain bool) (net.Conn, byte) {
	t.Helper()
	return connectS1(t, addr, clientID, func(p *packets.ConnectParams) {
		p.WillFlag, p.WillTopic, p.WillPayload, p.WillQos, p.WillRetain = true, topic, []byte("will of "+clientID), 1, retain
	})
}

// TestWillRules: a will outside the identity's topics, or retained
// elsewhere than on its own presence topic, is refused at CONNECT;
// an allowed will is published when the connection dies (the
// control), and dropped when the credential was revoked before.
func TestWillRules(t *testing.T) {
	var revoked atomic.Bool
	got := make(chan string, 8)
	b, err := Start(Config{Addr: "127.0.0.1:0"}, testCreds{revoked: &revoked}, slog.New(slog.DiscardHandler), map[string]Handler{
		"bm/v1/site/+/presence": func(topic string, payload []byte) { got <- topic + " " + string(payload) },
		"bm/v1/site/s2/#":       func(topic string, payload []byte) { got <- topic + " " + string(payload) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, r := range []struct {
		topic  string
		retain bool
	}{{"bm/v1/site/s2/presence", false}, {"bm/v1/site/s2/bmc/cmd", false}, {"bm/v1/site/s1/bmc/evt", true}, {"bm/v1/site/s1/x/presence", true}, {"bm/v1/site/s1/#", false}} {
		// mochi answers every refusal of the authentication hook with
		// 0x86 (bad user name or password).
		if c, code := connectWithWill(t, b.Addr, "edge-s1.w", r.topic, r.retain); c != nil {
			c.Close()
			t.Errorf("will on %s (retain %v) taken at CONNECT", r.topic, r.retain)
		} else if code != 0x86 {
			t.Errorf("will on %s (retain %v): reason 0x%02x; want 0x86", r.topic, r.retain, code)
		}
	}
	// The control: the site's own presence, published when it dies.
	c, code := connectWithWill(t, b.Addr, "edge-s1.a", "bm/v1/site/s1/presence", true)
	if c == nil {
		t.Fatalf("will on the site's own presence refused: 0x%02x", code)
	}
	c.Close()
	select {
	case m := <-got:
		if m != "bm/v1/site/s1/presence will of edge-s1.a" {
			t.Fatalf("will published as %q", m)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the will of a valid credential was not published (the control)")
	}
	// Revoked before the connection dies: nothing is published.
	c, _ = connectWithWill(t, b.Addr, "edge-s1.b", "bm/v1/site/s1/presence", true)
	if c == nil {
		t.Fatal("second connection refused")
	}
	revoked.Store(true)
	c.Close()
	select {
	case m := <-got:
		t.Errorf("the will of a revoked credential was published: %q", m)
	case <-time.After(time.Second):
	}
}
