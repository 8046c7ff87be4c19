package mqttbroker

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// rawClient is a bare MQTT client (v5 or 3.1.1) logged in as site:s1.
type rawClient struct {
	t   *testing.T
	c   net.Conn
	r   *bufio.Reader
	ver byte
	id  uint16
}

func dialRaw(t *testing.T, addr string, ver byte, clientID string) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: ver,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: clientID,
			UsernameFlag: true, PasswordFlag: true, Username: []byte("site:s1"), Password: []byte("pw")}}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	rc := &rawClient{t: t, c: c, r: bufio.NewReader(c), ver: ver}
	rc.write(buf.Bytes())
	typ, body := rc.read()
	if typ != packets.Connack || len(body) < 2 || body[1] != 0 {
		t.Fatalf("CONNECT v%d as %s: packet type %d, %x", ver, clientID, typ, body)
	}
	return rc
}

func (rc *rawClient) write(b []byte) {
	rc.t.Helper()
	_ = rc.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.c.Write(b); err != nil {
		rc.t.Fatal(err)
	}
}

// read returns the next packet's type and body.
func (rc *rawClient) read() (byte, []byte) {
	rc.t.Helper()
	_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, err := rc.r.ReadByte()
	if err != nil {
		rc.t.Fatal(err)
	}
	n, mul := 0, 1
	for {
		b, err := rc.r.ReadByte()
		if err != nil {
			rc.t.Fatal(err)
		}
		n += int(b&0x7f) * mul
		mul *= 128
		if b&0x80 == 0 {
			break
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(rc.r, body); err != nil {
		rc.t.Fatal(err)
	}
	return h >> 4, body
}

// subscribe sends one SUBSCRIBE of filters and returns the SUBACK's
// reason codes.
func (rc *rawClient) subscribe(filters ...string) []byte {
	rc.t.Helper()
	rc.id++
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: rc.ver, PacketID: rc.id}
	for _, f := range filters {
		pk.Filters = append(pk.Filters, packets.Subscription{Filter: f, Qos: 1})
	}
	var buf bytes.Buffer
	if err := pk.SubscribeEncode(&buf); err != nil {
		rc.t.Fatal(err)
	}
	rc.write(buf.Bytes())
	for {
		typ, body := rc.read()
		if typ != packets.Suback {
			continue
		}
		body = body[2:] // packet identifier
		if rc.ver == 5 {
			n, i := 0, 0
			for mul := 1; ; mul *= 128 { // properties' length
				n += int(body[i]&0x7f) * mul
				i++
				if body[i-1]&0x80 == 0 {
					break
				}
			}
			body = body[i+n:]
		}
		return body
	}
}

func topics(from, to int) []string {
	var l []string
	for i := from; i < to; i++ {
		l = append(l, fmt.Sprintf("bm/v1/site/s1/t/%d", i))
	}
	return l
}

// TestSubscriptionCap: the filters a client holds are capped across its
// SUBSCRIBE packets: past MaxSubscriptions a v5 client gets 0x97 (quota
// exceeded) and a 3.1.1 client 0x80; a filter it holds already, taken
// again, does not count; after an UNSUBSCRIBE it may take another; and
// the refused filters cost the broker nothing (20,000 distinct filters
// in 200 SUBSCRIBEs leave the heap where it was).
func TestSubscriptionCap(t *testing.T) {
	b, err := Start(Config{Addr: "127.0.0.1:0", MaxSubscriptions: 10}, testCreds{}, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	v5 := dialRaw(t, b.Addr, 5, "edge-s1.v5")
	want := func(what string, got []byte, codes ...byte) {
		t.Helper()
		if !bytes.Equal(got, codes) {
			t.Errorf("%s: SUBACK codes %x, want %x", what, got, codes)
		}
	}
	want("8 filters", v5.subscribe(topics(0, 8)...), 1, 1, 1, 1, 1, 1, 1, 1)
	want("4 more, 2 past the cap", v5.subscribe(topics(8, 12)...), 1, 1, 0x97, 0x97)
	want("held ones again, and a new one", v5.subscribe(append(topics(0, 2), topics(20, 21)...)...), 1, 1, 0x97)
	want("a filter outside the identity's topics", v5.subscribe("bm/v1/site/s2/#"), 0x87)
	// An UNSUBSCRIBE makes room.
	var buf bytes.Buffer
	un := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, ProtocolVersion: 5, PacketID: 999,
		Filters: packets.Subscriptions{{Filter: topics(0, 1)[0]}}}
	if err := un.UnsubscribeEncode(&buf); err != nil {
		t.Fatal(err)
	}
	v5.write(buf.Bytes())
	for typ, _ := v5.read(); typ != packets.Unsuback; typ, _ = v5.read() {
	}
	want("one after an UNSUBSCRIBE", v5.subscribe(topics(30, 32)...), 1, 0x97)

	v3 := dialRaw(t, b.Addr, 4, "edge-s1.v3")
	want("MQTT 3.1.1, 12 filters", v3.subscribe(topics(0, 12)...), 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0x80, 0x80)

	// Memory: 20,000 distinct filters from one client.
	many := dialRaw(t, b.Addr, 5, "edge-s1.many")
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	refused := 0
	for p := 0; p < 200; p++ {
		for _, code := range many.subscribe(topics(1000+p*100, 1000+(p+1)*100)...) {
			if code == 0x97 {
				refused++
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("20,000 SUBSCRIBE filters: %d refused, heap %+d KiB", refused, grew>>10)
	if refused != 20000-10 {
		t.Errorf("%d of 20,000 filters refused, want %d", refused, 20000-10)
	}
	if grew > 8<<20 {
		t.Errorf("20,000 refused filters grew the heap by %d MiB", grew>>20)
	}
}
