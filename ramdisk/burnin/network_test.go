package burnin

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/freeport"
	"github.com/bmedge/bmedge/lib/waitfor"
)

const (
	uuidA = "aaaaaaaa-0000-4000-8000-000000000001"
	uuidB = "bbbbbbbb-0000-4000-8000-000000000002"
	uuidC = "cccccccc-0000-4000-8000-000000000003"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// freePort returns a 127.0.0.1 address nobody listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

type netRun struct {
	res NetworkResult
	err error
}

// startNetwork runs Network in the background; the test waits for it.
func startNetwork(t *testing.T, ctx context.Context, o NetworkOptions) <-chan netRun {
	t.Helper()
	ch := make(chan netRun, 1)
	go func() {
		r, err := Network(ctx, o)
		ch <- netRun{r, err}
	}()
	return ch
}

func wait(t *testing.T, ch <-chan netRun, what string) netRun {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not end", what)
	}
	return netRun{}
}

// waitListening waits until addr accepts a connection (and closes it:
// the writer counts it as a failed handshake).
func waitListening(t *testing.T, addr string) {
	t.Helper()
	if !waitfor.Until(4*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		t.Fatalf("nothing listens on %s", addr)
	}
}

func pairOptions(addr string, runtime time.Duration) (w, r NetworkOptions) {
	w = NetworkOptions{Role: drivers.NetworkRoleWriter, Listen: addr, Partner: "reader", Node: uuidA, PartnerNode: uuidB, Key: testKey,
		Runtime: runtime, PairingTimeout: 20 * time.Second, RetryInterval: 50 * time.Millisecond}
	r = NetworkOptions{Role: drivers.NetworkRoleReader, Partner: addr, Node: uuidB, PartnerNode: uuidA, Key: testKey,
		Runtime: runtime, PairingTimeout: 20 * time.Second, RetryInterval: 50 * time.Millisecond}
	return w, r
}

// TestNetworkPair: a writer and a reader pair, stream both ways over one
// connection and agree on the figures; the reader started first retries
// until the writer listens.
func TestNetworkPair(t *testing.T) {
	addr := freePort(t)
	wo, ro := pairOptions(addr, 700*time.Millisecond)
	var mu sync.Mutex
	var last float64
	ro.Progress = func(f float64) { mu.Lock(); last = f; mu.Unlock() }
	// The reader's first attempt meets a listener that is not the writer
	// (a failed handshake), the next ones a closed port, until the writer
	// listens.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	rch := startNetwork(t, context.Background(), ro)
	first, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	first.Close()
	wch := startNetwork(t, context.Background(), wo)
	w, r := wait(t, wch, "writer"), wait(t, rch, "reader")
	if w.err != nil || r.err != nil {
		t.Fatalf("writer: %v; reader: %v", w.err, r.err)
	}
	if w.res.Write.Bytes == 0 || r.res.Write.Bytes == 0 {
		t.Fatalf("nothing streamed: %+v %+v", w.res, r.res)
	}
	if w.res.Write.Bytes != r.res.Read.Bytes || r.res.Write.Bytes != w.res.Read.Bytes {
		t.Fatalf("the two sides disagree: writer %+v, reader %+v", w.res, r.res)
	}
	if w.res.Write.Errors+w.res.Read.Errors+r.res.Write.Errors+r.res.Read.Errors != 0 || w.res.Write.MBps <= 0 || r.res.Write.MBps <= 0 {
		t.Fatalf("figures: writer %+v, reader %+v", w.res, r.res)
	}
	if mu.Lock(); last <= 0 {
		t.Errorf("no progress reported")
	}
	mu.Unlock()
	s := NetworkSummary(w.res)
	if !strings.Contains(s, "writer paired with node "+uuidB) || !strings.Contains(s, "0 errors") {
		t.Errorf("summary: %s", s)
	}
	t.Logf("writer: %s", s)
	t.Logf("reader: %s", NetworkSummary(r.res))
}

// TestNetworkAbort: cancelling one side mid-stream ends both promptly.
func TestNetworkAbort(t *testing.T) {
	addr := freePort(t)
	wo, ro := pairOptions(addr, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	streaming := make(chan struct{})
	wo.Progress = func(float64) { once.Do(func() { close(streaming) }) }
	wch := startNetwork(t, ctx, wo)
	rch := startNetwork(t, context.Background(), ro)
	select {
	case <-streaming:
	case <-time.After(30 * time.Second):
		t.Fatal("no stream")
	}
	cancel()
	w, r := wait(t, wch, "writer"), wait(t, rch, "reader")
	if w.err == nil || !strings.Contains(w.err.Error(), "cancelled") {
		t.Fatalf("writer after abort: %v", w.err)
	}
	if r.err == nil || !strings.Contains(r.err.Error(), "reading from partner node "+uuidA) {
		t.Fatalf("reader after the writer's abort: %v", r.err)
	}
	t.Logf("writer: %v\nreader: %v", w.err, r.err)
	// An abort while waiting for the partner ends the wait too.
	ctx2, cancel2 := context.WithCancel(context.Background())
	wo.Listen = freePort(t)
	ch := startNetwork(t, ctx2, wo)
	waitListening(t, wo.Listen)
	cancel2()
	if got := wait(t, ch, "waiting writer"); got.err == nil || !strings.Contains(got.err.Error(), "cancelled while waiting") {
		t.Fatalf("writer aborted while waiting: %v", got.err)
	}
}

// TestNetworkMismatchedPairing: A (writer) names B; B (reader) names C,
// so B holds another pair's key: the reader fails after its failed
// handshakes naming what to check; the writer, which a stranger must not
// be able to end, waits until its pairing timeout and names the refused
// hellos.
func TestNetworkMismatchedPairing(t *testing.T) {
	addr := freePort(t)
	wo, ro := pairOptions(addr, time.Second)
	wo.PairingTimeout = 2 * time.Second
	ro.PartnerNode = uuidC
	ro.Key = []byte("another pair's key, B with C....")
	wch := startNetwork(t, context.Background(), wo)
	rch := startNetwork(t, context.Background(), ro)
	w, r := wait(t, wch, "writer"), wait(t, rch, "reader")
	if w.err == nil || !strings.Contains(w.err.Error(), "did not connect and authenticate to this writer") ||
		!strings.Contains(w.err.Error(), "does not carry this pair's key") || !strings.Contains(w.err.Error(), "name each other as partner_node") {
		t.Fatalf("writer: %v", w.err)
	}
	if r.err == nil || !strings.Contains(r.err.Error(), "3 handshakes with "+addr+" failed") || !strings.Contains(r.err.Error(), "did not recognise this node's hello") {
		t.Fatalf("reader: %v", r.err)
	}
	t.Logf("writer: %v\nreader: %v", w.err, r.err)
}

// TestNetworkNoPartner: a reader whose writer never answers and a writer
// whose reader never comes fail at the pairing timeout saying what to check.
func TestNetworkNoPartner(t *testing.T) {
	_, ro := pairOptions(freePort(t), time.Second)
	ro.PairingTimeout = 600 * time.Millisecond
	r := wait(t, startNetwork(t, context.Background(), ro), "reader")
	if r.err == nil || !strings.Contains(r.err.Error(), "did not answer within 600ms") || !strings.Contains(r.err.Error(), "connection refused") {
		t.Fatalf("reader: %v", r.err)
	}
	wo, _ := pairOptions(freePort(t), time.Second)
	wo.PairingTimeout = 600 * time.Millisecond
	w := wait(t, startNetwork(t, context.Background(), wo), "writer")
	if w.err == nil || !strings.Contains(w.err.Error(), "did not connect and authenticate to this writer") || !strings.Contains(w.err.Error(), "no connection") {
		t.Fatalf("writer: %v", w.err)
	}
}

// corruptingProxy relays between the reader and the writer, flipping
// one byte of the writer's stream at offset at.
func corruptingProxy(t *testing.T, to string, at int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		u, err := net.Dial("tcp", to)
		if err != nil {
			return
		}
		defer u.Close()
		go io.Copy(u, c)
		buf := make([]byte, 32<<10)
		seen := 0
		for {
			n, err := u.Read(buf)
			if n > 0 {
				if at >= seen && at < seen+n {
					buf[at-seen] ^= 0x40
				}
				seen += n
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return l.Addr().String()
}

// TestNetworkCorruptedBlock: a byte changed on the wire is found and
// counted; both sides fail with the figures.
func TestNetworkCorruptedBlock(t *testing.T) {
	addr := freePort(t)
	wo, ro := pairOptions(addr, 500*time.Millisecond)
	wch := startNetwork(t, context.Background(), wo)
	waitListening(t, addr)
	ro.Partner = corruptingProxy(t, addr, 300000)
	rch := startNetwork(t, context.Background(), ro)
	w, r := wait(t, wch, "writer"), wait(t, rch, "reader")
	if r.res.Read.Errors != 1 || w.res.Write.Errors != 1 {
		t.Fatalf("errors: reader read %d, writer wrote %d; want 1 each (%v; %v)", r.res.Read.Errors, w.res.Write.Errors, r.err, w.err)
	}
	if w.err == nil || !strings.Contains(w.err.Error(), "1 of the blocks this node wrote and 0 of those it read arrived wrong") {
		t.Fatalf("writer: %v", w.err)
	}
	if r.err == nil || !strings.Contains(r.err.Error(), "0 of the blocks this node wrote and 1 of those it read arrived wrong") {
		t.Fatalf("reader: %v", r.err)
	}
}

// TestNetworkFrameBounds: a frame header announcing more than a block is
// refused before anything of it is read.
func TestNetworkFrameBounds(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		h := make([]byte, frameHeader)
		putHeader(h, frameData, 1<<30, 0)
		b.Write(h)
	}()
	_, err := receiveDirection(a, newPattern(make([]byte, 32)), NetworkOptions{IdleTimeout: 5 * time.Second}, func() {})
	if err == nil || !strings.Contains(err.Error(), "malformed frame (type 1, 1073741824 bytes)") {
		t.Fatalf("oversized frame: %v", err)
	}
}

// refusalClient is an independent client of the writer's listener (no
// code of this package): it speaks the handshake from its description.
const refusalClient = `
import hashlib, hmac, os, socket, sys, time, json
host, port, key, reader, writer, mode = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3]), sys.argv[4].encode(), sys.argv[5].encode(), sys.argv[6]
MAGIC = b"bmnetbi2"
def recv_all(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            return b
        b += c
    return b
def conn():
    s = socket.create_connection((host, port), timeout=20)
    return s
def outcome(s):
    try:
        b = s.recv(8)
    except socket.timeout:
        return "no answer"
    except ConnectionResetError:
        return "closed"
    if b == MAGIC:
        return "accepted"
    return "closed" if not b else "other"
def nothing(s):
    # what the writer sends before it closes: must be nothing
    got = 0
    try:
        while True:
            c = s.recv(4096)
            if not c:
                break
            got += len(c)
    except (socket.timeout, ConnectionResetError):
        pass
    return got
def hello(k, rn, r, w):
    return MAGIC + rn + hmac.new(k, b"hello" + rn + r + w, hashlib.sha256).digest()
def handshake(s, k, replay=None):
    if replay:
        s.sendall(replay[0])
        recv_all(s, 72)
        s.sendall(replay[1])
        return outcome(s), replay
    rn = os.urandom(32)
    h = hello(k, rn, reader, writer)
    s.sendall(h)
    ch = recv_all(s, 72)
    if len(ch) != 72:
        return "closed", None
    wn = ch[8:40]
    if ch[40:] != hmac.new(k, b"writer" + rn + wn + writer + reader, hashlib.sha256).digest():
        return "bad challenge", None
    resp = hmac.new(k, b"reader" + wn + rn + reader + writer, hashlib.sha256).digest()
    s.sendall(resp)
    return outcome(s), (h, resp)
out = {}
if mode == "garbage":
    s = conn(); s.sendall(os.urandom(112)); out["garbage"] = "closed"; out["got"] = nothing(s)
elif mode == "wrongkey":
    s = conn(); s.sendall(hello(b"x" * 32, os.urandom(32), reader, writer)); out["wrongkey"] = "closed"; out["got"] = nothing(s)
elif mode == "names":
    # the right key, other node names: not this pair's hello
    s = conn(); s.sendall(hello(key, os.urandom(32), writer, reader)); out["names"] = "closed"; out["got"] = nothing(s)
elif mode == "slow":
    s = conn(); s.sendall(MAGIC + b"\0" * 8); out["slow"] = "closed"; out["got"] = nothing(s)
elif mode == "replay":
    port2 = int(sys.argv[7])
    s = conn(); out["first"], rec = handshake(s, key); s.close()
    s = socket.create_connection((host, port2), timeout=20)
    out["replay"], _ = handshake(s, key, replay=rec)
elif mode == "connect":
    try:
        s = conn(); out["connect"] = "connected"
    except OSError as e:
        out["connect"] = "refused"
print(json.dumps(out))
`

func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("python3 is missing")
		}
		t.Skip("python3 is missing: the independent client of the refusal tests needs it")
	}
	return p
}

func runClient(t *testing.T, py, script string, args ...string) string {
	t.Helper()
	out, err := exec.Command(py, append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("client %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestNetworkListenerRefusals: an independent client (python3) is refused
// for garbage, a wrong key and a handshake too slow for the deadline, and
// gets not one byte back for any of them; a handshake it recorded with the
// right key is refused when replayed to a new listener (fresh nonces).
// None of them ends the writer's wait: the control, a handshake with the
// right key, pairs after them.
func TestNetworkListenerRefusals(t *testing.T) {
	py := python(t)
	script := filepath.Join(t.TempDir(), "client.py")
	if err := os.WriteFile(script, []byte(refusalClient), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	host, port, _ := net.SplitHostPort(addr)
	wo, _ := pairOptions(addr, time.Second)
	wo.HandshakeTimeout = time.Second
	wch := startNetwork(t, context.Background(), wo)
	key := hex.EncodeToString(testKey)
	client := func(mode string, extra ...string) string {
		return runClient(t, py, script, append([]string{host, port, key, uuidB, uuidA, mode}, extra...)...)
	}
	// The first attempt may come before the listener: retry "connect".
	waitfor.Until(2*time.Second, func() bool { return client("connect") == `{"connect": "connected"}` })
	for mode, want := range map[string]string{
		"garbage":  `{"garbage": "closed", "got": 0}`,
		"slow":     `{"slow": "closed", "got": 0}`,
		"wrongkey": `{"wrongkey": "closed", "got": 0}`,
		"names":    `{"names": "closed", "got": 0}`,
	} {
		if got := client(mode); got != want {
			t.Fatalf("%s: %s, want %s", mode, got, want)
		}
	}
	addr2 := freePort(t)
	_, port2, _ := net.SplitHostPort(addr2)
	wo2 := wo
	wo2.Listen = addr2
	wch2 := startNetwork(t, context.Background(), wo2)
	waitListening(t, addr2)
	// The first handshake goes to the first listener (which then streams
	// to a client that leaves), the replay to the second.
	if got := client("replay", port2); got != `{"first": "accepted", "replay": "closed"}` {
		t.Fatalf("replay: %s", got)
	}
	if w := wait(t, wch, "writer"); w.err == nil || !strings.Contains(w.err.Error(), "partner node "+uuidB) || w.res.FailedHandshakes < 4 {
		t.Fatalf("first writer, paired after 4 refused handshakes with a client that then left: %v %+v", w.err, w.res)
	}
	// The control: the second listener saw the probe and the replay fail
	// and still pairs with the real reader.
	_, ro := pairOptions(addr2, 300*time.Millisecond)
	r := wait(t, startNetwork(t, context.Background(), ro), "reader")
	w2 := wait(t, wch2, "second writer")
	if r.err != nil || w2.err != nil || w2.res.FailedHandshakes < 2 {
		t.Fatalf("second writer after a replay: %v %+v; reader %v", w2.err, w2.res, r.err)
	}
}

// TestNetworkSurvivesScan (issue 30, point 7): while 16 connections that
// send nothing (10 sources, and one source over its share) and 1 MB of
// garbage hold or hit the writer's listener, the partner still pairs and
// the burn-in passes; none of them reads a byte.
func TestNetworkSurvivesScan(t *testing.T) {
	addr := freePort(t)
	wo, ro := pairOptions(addr, 300*time.Millisecond)
	wo.Partner = "127.0.0.1" // the reader's address: its share is kept
	wch := startNetwork(t, context.Background(), wo)
	waitListening(t, addr)
	var scan []net.Conn
	dial := func(src string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("scan from %s: %v", src, err)
		}
		scan = append(scan, c)
		return c
	}
	for i := range 10 {
		dial(fmt.Sprintf("127.0.0.%d", 51+i))
	}
	for range 6 {
		dial("127.0.0.50")
	}
	g := dial("127.0.0.61")
	go func() { _, _ = g.Write(bytes.Repeat([]byte{0x5a, 0xa5, 0x17}, (1<<20)/3)) }()
	defer func() {
		for _, c := range scan {
			c.Close()
		}
	}()
	r := wait(t, startNetwork(t, context.Background(), ro), "reader")
	w := wait(t, wch, "writer")
	if r.err != nil || w.err != nil {
		t.Fatalf("under a scan: writer %v, reader %v", w.err, r.err)
	}
	if w.res.Write.Bytes == 0 || w.res.Read.Bytes == 0 {
		t.Fatalf("nothing streamed: %+v", w.res)
	}
	// Nothing told to the scanners: each reads EOF or a reset, no byte.
	for i, c := range scan {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(make([]byte, 256))
		var ne net.Error
		if n > 0 || (errors.As(err, &ne) && ne.Timeout()) {
			t.Fatalf("scanner %d (%s): read %d bytes, %v; want nothing and the connection closed", i, c.LocalAddr(), n, err)
		}
	}
	t.Logf("writer: %s", NetworkSummary(w.res))
}

// TestNetworkStepArgs: the step refuses a bad config and a missing pair
// key before opening anything.
func TestNetworkStepArgs(t *testing.T) {
	cfg := map[string]any{"role": "writer", "partner": "10.0.0.2:9000", "partner_node": "b"}
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{}, "agent_burnin_fio_network_config is required"},
		{map[string]any{drivers.ArgBurninNetworkConfig: map[string]any{"role": "both", "partner": "x", "partner_node": "b"}}, `role "both": want "writer"`},
		{map[string]any{drivers.ArgBurninNetworkConfig: cfg}, "lacks the pair key"},
		{map[string]any{drivers.ArgBurninNetworkConfig: cfg, drivers.ArgBurninNetworkRuntime: 0}, "agent_burnin_fio_network_runtime=0: want a number of seconds above 0"},
	} {
		_, _, err := NetworkStep(context.Background(), c.args, func(float64, string) {}, "127.0.0.1:0")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
