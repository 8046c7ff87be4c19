package mqttbroker

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
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
	log := slog.New(quietHandler{slog.NewTextHandler(&buf, nil)}).With("component", "broker")
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
