package mqttlink_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/lib/waitfor"
)

// TestConcurrentPublishes: publishes of many goroutines at once on one
// link (the edge agent's results, consoles and heartbeats share theirs)
// each reach the broker whole, plain and over TLS: every packet is
// written in one piece, never interleaved with another's, and the
// broker never drops the link for a malformed packet.
func TestConcurrentPublishes(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"plain", false}, {"tls", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var url string
			var extra mqttlink.Config
			if tc.tls {
				lab := newTLSLab(t)
				url = lab.startTLSBroker(t, false)
				cfg, err := mqttlink.TLSFromCAFile(lab.caFile)
				if err != nil {
					t.Fatal(err)
				}
				extra.TLS = cfg
			} else {
				addr := freeAddr(t)
				b := startBroker(t, addr)
				t.Cleanup(func() { _ = b.Close() })
				url = "mqtt://" + addr
			}
			var (
				mu  sync.Mutex
				got = map[string][]byte{}
			)
			rx := extra
			rx.URL, rx.ClientID, rx.Username, rx.Subscriptions = url, "rx", "rx", []string{"c/#"}
			rx.Handler = func(topic string, payload []byte) {
				mu.Lock()
				got[topic] = append([]byte(nil), payload...)
				mu.Unlock()
			}
			lr := dial(t, rx)
			tx := extra
			tx.URL, tx.ClientID, tx.Username = url, "tx", "tx"
			var upsN int
			var upsMu sync.Mutex
			tx.OnUp = func() { upsMu.Lock(); upsN++; upsMu.Unlock() }
			lt := dial(t, tx)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			for _, l := range []*mqttlink.Link{lr, lt} {
				if err := l.AwaitUp(ctx); err != nil {
					t.Fatal(err)
				}
			}
			const writers, each = 32, 40
			payload := func(w, i int) []byte {
				return bytes.Repeat([]byte{byte('a' + w%26)}, 100+(w*each+i)*37%4000)
			}
			var wg sync.WaitGroup
			errs := make(chan error, writers*each)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						if err := lt.Publish(ctx, fmt.Sprintf("c/%d/%d", w, i), payload(w, i), false); err != nil {
							errs <- fmt.Errorf("writer %d publish %d: %w", w, i, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if !waitfor.Until(time.Minute, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(got) == writers*each
			}) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("the broker passed on %d of %d publishes", len(got), writers*each)
			}
			mu.Lock()
			defer mu.Unlock()
			for w := range writers {
				for i := range each {
					if !bytes.Equal(got[fmt.Sprintf("c/%d/%d", w, i)], payload(w, i)) {
						t.Fatalf("publish %d of writer %d arrived changed", i, w)
					}
				}
			}
			upsMu.Lock()
			defer upsMu.Unlock()
			if upsN != 1 {
				t.Fatalf("the publishing link came up %d times: the broker dropped it", upsN)
			}
		})
	}
}
