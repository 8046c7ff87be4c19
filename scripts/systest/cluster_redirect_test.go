package systest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestClusterFollowerRedirects: every follower's broker port answers a
// site's CONNECT (an independent client: raw MQTT v5 bytes here, and
// Debian's mosquitto_sub) with CONNACK 0x9C "use another server" and the
// leader's broker URL as Server Reference; after a transfer of the
// leadership, the new followers (the old leader among them, its port
// handed from its engine's broker to the redirect) name the new leader.
func TestClusterFollowerRedirects(t *testing.T) {
	t.Parallel()
	ms, htpasswd := testrig.NewCluster(t, 3)
	peers := testrig.Peers(ms)
	for _, m := range ms {
		m.Start(t, peers, htpasswd)
	}
	leader := testrig.Settled(t, ms, 3, 20*time.Second)
	check := func(leader string) {
		t.Helper()
		var want string
		for _, m := range ms {
			if m.Name == leader {
				want = "mqtt://" + m.MQTT
			}
		}
		for _, m := range ms {
			if m.Name == leader {
				continue
			}
			var code byte
			var ref, last string
			deadline := time.Now().Add(30 * time.Second)
			for {
				var err error
				code, ref, err = connectForReference(m.MQTT)
				if err == nil && code == 0x9C && ref == want {
					break
				}
				last = fmt.Sprintf("code 0x%02X reference %q err %v", code, ref, err)
				if time.Now().After(deadline) {
					t.Fatalf("follower %s's broker: %s, want 0x9C and reference %s", m.Name, last, want)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if _, err := exec.LookPath("mosquitto_sub"); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				host, port, _ := net.SplitHostPort(m.MQTT)
				out, err := exec.CommandContext(ctx, "mosquitto_sub", "-V", "5", "-h", host, "-p", port, "-i", "probe", "-u", "site1", "-P", "x", "-t", "x", "-C", "1").CombinedOutput()
				cancel()
				if err == nil || !strings.Contains(strings.ToLower(string(out)), "another server") {
					t.Errorf("mosquitto_sub against follower %s: err %v, output %q; want refused with 'use another server'", m.Name, err, out)
				}
			}
			// The follower counts what it answered in its /metrics.
			text := metricsOf(t, m)
			if !strings.Contains(text, `bmedge_cluster_mqtt_redirected_total{answer="moved"}`) ||
				strings.Contains(text, `bmedge_cluster_mqtt_redirected_total{answer="moved"} 0`+"\n") {
				t.Errorf("/metrics of follower %s counts no redirected CONNECT:\n%s", m.Name, grepLines(text, "redirected"))
			}
		}
	}
	check(leader)
	var to string
	for _, m := range ms {
		if m.Name != leader {
			to = m.Name
			break
		}
	}
	if code := ms[0].Client(t).Do("PUT", "/v1/cluster/leader", map[string]string{"name": to}, nil); code/100 != 2 {
		t.Fatalf("transfer leadership to %s: %d", to, code)
	}
	if got := testrig.Settled(t, ms, 3, 30*time.Second); got != to {
		t.Fatalf("leader after the transfer: %s, want %s", got, to)
	}
	check(to)
}

// connectForReference sends an MQTT v5 CONNECT to addr and returns the CONNACK's
// reason code and Server Reference property (0x1C).
func connectForReference(addr string) (byte, string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var vh bytes.Buffer
	vh.Write([]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 60, 0}) // v5, clean start, keepalive 60, no properties
	vh.Write([]byte{0, 5, 'p', 'r', 'o', 'b', 'e'})
	pkt := append([]byte{0x10, byte(vh.Len())}, vh.Bytes()...)
	if _, err := c.Write(pkt); err != nil {
		return 0, "", err
	}
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return 0, "", err
	}
	if hdr[0] != 0x20 || hdr[1]&0x80 != 0 {
		return 0, "", fmt.Errorf("not a short CONNACK: % x", hdr)
	}
	body := make([]byte, hdr[1])
	if _, err := io.ReadFull(c, body); err != nil {
		return 0, "", err
	}
	if len(body) < 3 {
		return 0, "", fmt.Errorf("CONNACK of %d bytes", len(body))
	}
	code := body[1]
	plen := int(body[2]) // short properties in this test's answers
	if body[2]&0x80 != 0 || 3+plen > len(body) {
		return code, "", fmt.Errorf("CONNACK properties of unexpected length")
	}
	p := body[3 : 3+plen]
	for len(p) > 0 {
		id := p[0]
		p = p[1:]
		switch id {
		case 0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A:
			p = p[1:]
		case 0x13, 0x21, 0x22:
			p = p[2:]
		case 0x02, 0x11, 0x18, 0x27:
			p = p[4:]
		case 0x03, 0x08, 0x09, 0x12, 0x15, 0x16, 0x1A, 0x1C, 0x1F:
			n := int(binary.BigEndian.Uint16(p))
			if id == 0x1C {
				return code, string(p[2 : 2+n]), nil
			}
			p = p[2+n:]
		default:
			return code, "", fmt.Errorf("property 0x%02X not known to this test", id)
		}
	}
	return code, "", nil
}
