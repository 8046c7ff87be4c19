package mqttbroker

import (
	"bytes"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/bmedge/bmedge/lib/waitfor"
)

// TestCloseWhileFlooded (issue 30, point 9): Close while clients keep
// connecting, some with a whole CONNECT, some with nothing. mochi's
// Server.Close waits on the WaitGroup that every new connection Adds to;
// a connection accepted during Close raced with that Wait (seen by the
// race detector under load). The broker stops accepting first, so under
// -race this holds; and Close returns (no connection is left that it
// does not wait for).
func TestCloseWhileFlooded(t *testing.T) {
	for round := range 4 {
		b, err := Start(Config{Addr: "127.0.0.1:0"}, testCreds{}, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		var dialed atomic.Int64
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					c, err := net.DialTimeout("tcp", b.Addr, time.Second)
					if err != nil {
						continue // refused once closed
					}
					dialed.Add(1)
					if g%2 == 0 {
						_, _ = c.Write(connectPacket("edge-s1-x", "site:s1", "pw"))
					}
					c.Close()
				}
			}()
		}
		// Close only once the flood is on.
		waitfor.Until(10*time.Second, func() bool { return dialed.Load() >= 50 })
		closed := make(chan struct{})
		go func() { b.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(30 * time.Second):
			buf := make([]byte, 1<<20)
			t.Fatalf("round %d: Close did not return within 30 s under a flood; goroutines:\n%s", round, buf[:runtime.Stack(buf, true)])
		}
		stop.Store(true)
		wg.Wait()
		if dialed.Load() < 50 {
			t.Fatalf("round %d: only %d connections made before Close; the flood did not happen", round, dialed.Load())
		}
		// Closed means closed: nothing accepts any more.
		if c, err := net.DialTimeout("tcp", b.Addr, time.Second); err == nil {
			c.Close()
			t.Fatalf("round %d: the broker's address still accepts after Close", round)
		}
	}
}

// connectPacket is an MQTT v5 CONNECT of clientID as user/password.
func connectPacket(clientID, user, password string) []byte {
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: clientID,
			UsernameFlag: true, PasswordFlag: true, Username: []byte(user), Password: []byte(password)}}
	var buf bytes.Buffer
	_ = pk.ConnectEncode(&buf)
	return buf.Bytes()
}
