package mqttbroker

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestCommandTopicsCoordinatorOnly (issue 30, point 4): a client with a
// site's credential (any of its client IDs) may not publish on the
// site's command topics, nor leave a last will there: the publish is
// refused (PUBACK 0x87 for QoS 1), nothing reaches the subscribers, and
// each refusal is counted; its own event topic works (the control).
func TestCommandTopicsCoordinatorOnly(t *testing.T) {
	got := make(chan string, 8)
	record := func(topic string, _ []byte) { got <- topic }
	b, err := Start(Config{Addr: "127.0.0.1:0"}, testCreds{}, slog.New(slog.DiscardHandler), map[string]Handler{
		"bm/v1/site/s1/#": record,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := net.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(connectPacket("edge-s1.tool", "site:s1", "pw")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if typ, body := readPacket(t, c); typ != packets.Connack || len(body) < 2 || body[1] != 0 {
		t.Fatalf("CONNACK: type %d, %x", typ, body)
	}
	for i, topic := range []string{"bm/v1/site/s1/bmc/cmd", "bm/v1/site/s1/node/n1/cmd", "bm/v1/site/s1/console/cmd", "bm/v1/site/s1/bmc/evt"} {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: topic, PacketID: uint16(i + 1),
			Payload: []byte(`{"v":1,"kind":"command","action":"power"}`), ProtocolVersion: 5}
		var buf bytes.Buffer
		if err := pk.PublishEncode(&buf); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(buf.Bytes()); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		typ, rest := readPacket(t, c)
		if typ != packets.Puback {
			t.Fatalf("answer to the publish on %s: packet type %d, want PUBACK", topic, typ)
		}
		reason := byte(0)
		if len(rest) >= 3 {
			reason = rest[2]
		}
		want := byte(0x87)
		if strings.HasSuffix(topic, "/evt") {
			want = 0
		}
		if reason != want {
			t.Errorf("PUBACK of %s: reason 0x%02x, want 0x%02x", topic, reason, want)
		}
	}
	select {
	case topic := <-got:
		if topic != "bm/v1/site/s1/bmc/evt" {
			t.Fatalf("delivered %s; only the event topic's publish should be", topic)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event topic's publish (the control) was not delivered")
	}
	select {
	case topic := <-got:
		t.Fatalf("also delivered %s", topic)
	default:
	}
	// A last will on a command topic is refused at CONNECT.
	if w, code := connectWithWill(t, b.Addr, "edge-s1.w", "bm/v1/site/s1/bmc/cmd", false); w != nil || code == 0 {
		if w != nil {
			w.Close()
		}
		t.Fatal("a last will on a command topic was taken")
	}
	if n := b.PublishRefused()[RefusedCommandTopic]; n != 4 {
		t.Fatalf("refusals on command topics counted %d, want 4 (three publishes (bmc, node and console commands), one will)", n)
	}
}

// readPacket reads one MQTT packet: its type and what follows its fixed
// header.
func readPacket(t *testing.T, c net.Conn) (byte, []byte) {
	t.Helper()
	first := make([]byte, 1)
	if _, err := io.ReadFull(c, first); err != nil {
		t.Fatal(err)
	}
	n, shift := 0, 0
	for {
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		n |= int(b[0]&0x7f) << shift
		if b[0]&0x80 == 0 {
			break
		}
		shift += 7
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	return first[0] >> 4, body
}
