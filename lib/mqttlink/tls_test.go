package mqttlink_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/certs"
	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/mqttlink"
)

// tlsLab is a CA, a server certificate for 127.0.0.1 signed by it, and a
// second, unrelated CA.
type tlsLab struct {
	ca, srv, other *certs.Pair
	caFile         string // PEM of ca
	otherFile      string // PEM of other
}

func newTLSLab(t *testing.T) *tlsLab {
	t.Helper()
	ca, err := certs.MakeCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := certs.MakeServerCert(ca, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.MakeCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l := &tlsLab{ca: ca, srv: srv, other: other, caFile: filepath.Join(dir, "ca.pem"), otherFile: filepath.Join(dir, "other.pem")}
	for f, p := range map[string]*certs.Pair{l.caFile: ca, l.otherFile: other} {
		if err := os.WriteFile(f, p.CertPEM(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// startTLSBroker serves MQTT over TLS with the server certificate,
// followed by the CA when withCA (as a pinned client needs).
func (l *tlsLab) startTLSBroker(t *testing.T, withCA bool) string {
	t.Helper()
	chain := [][]byte{l.srv.Cert.Raw}
	if withCA {
		chain = append(chain, l.ca.Cert.Raw)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: chain, PrivateKey: l.srv.Key}}, MinVersion: tls.VersionTLS12}
	addr := freeAddr(t)
	b, err := mqttbroker.Start(mqttbroker.Config{Addr: addr, TLS: cfg}, creds{}, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return "mqtts://" + addr
}

// roundTrip connects with tc and sends itself a message.
func roundTrip(t *testing.T, url string, tc *tls.Config) error {
	t.Helper()
	var in inbox
	l := dial(t, mqttlink.Config{URL: url, ClientID: "c", Username: "u", Subscriptions: []string{"t/#"}, Handler: in.handle, TLS: tc})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := l.AwaitUp(ctx); err != nil {
		return err
	}
	if err := l.Publish(ctx, "t/x", []byte("hi"), false); err != nil {
		return err
	}
	in.await(t, "t/x=hi", 5*time.Second)
	return nil
}

func TestTLSWithCAFile(t *testing.T) {
	lab := newTLSLab(t)
	url := lab.startTLSBroker(t, false)
	good, err := mqttlink.TLSFromCAFile(lab.caFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(t, url, good); err != nil {
		t.Fatalf("with the right CA: %v", err)
	}
	wrong, err := mqttlink.TLSFromCAFile(lab.otherFile)
	if err != nil {
		t.Fatal(err)
	}
	err = roundTrip(t, url, wrong)
	if err == nil || !strings.Contains(err.Error(), "not signed by the CA this client trusts") {
		t.Fatalf("with a wrong CA: %v; want a refusal that names the CA", err)
	}
	// Plain MQTT against the TLS port is refused too.
	l := dial(t, mqttlink.Config{URL: strings.Replace(url, "mqtts://", "mqtt://", 1), ClientID: "p", Username: "u"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.AwaitUp(ctx); err == nil {
		t.Fatal("plain MQTT connected to the TLS listener")
	}
}

func TestTLSWithPin(t *testing.T) {
	lab := newTLSLab(t)
	url := lab.startTLSBroker(t, true)
	pin := mqttlink.Pin(lab.ca.Cert)
	if len(pin) != len(mqttlink.PinPrefix)+43 {
		t.Fatalf("pin %q is not sha256/ plus 43 characters", pin)
	}
	good, err := mqttlink.TLSFromPin(pin, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(t, url, good); err != nil {
		t.Fatalf("with the CA's pin: %v", err)
	}
	wrong, _ := mqttlink.TLSFromPin(mqttlink.Pin(lab.other.Cert), "127.0.0.1")
	if err := roundTrip(t, url, wrong); err == nil || !strings.Contains(err.Error(), "matches the CA pin") {
		t.Fatalf("with another CA's pin: %v; want a pin mismatch", err)
	}
	// A server that does not send its CA cannot be checked against a pin.
	bare := lab.startTLSBroker(t, false)
	if err := roundTrip(t, bare, good); err == nil || !strings.Contains(err.Error(), "followed by its CA") {
		t.Fatalf("server without its CA in the chain: %v; want an error saying the chain must hold the CA", err)
	}
	for _, bad := range []string{"", "md5/abc", "sha256/short", "sha256/" + strings.Repeat("!", 43)} {
		if _, err := mqttlink.TLSFromPin(bad, "127.0.0.1"); err == nil {
			t.Errorf("pin %q accepted", bad)
		}
	}
}

// TestTLSServerNameChecked: a certificate for another host is refused
// even when its CA is trusted.
func TestTLSServerNameChecked(t *testing.T) {
	lab := newTLSLab(t)
	srv, err := certs.MakeServerCert(lab.ca, []string{"broker.example"})
	if err != nil {
		t.Fatal(err)
	}
	lab.srv = srv
	url := lab.startTLSBroker(t, true)
	for name, mk := range map[string]func() (*tls.Config, error){
		"CA file": func() (*tls.Config, error) { return mqttlink.TLSFromCAFile(lab.caFile) },
		"pin":     func() (*tls.Config, error) { return mqttlink.TLSFromPin(mqttlink.Pin(lab.ca.Cert), "127.0.0.1") },
	} {
		tc, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		if err := roundTrip(t, url, tc); err == nil {
			t.Errorf("%s: a certificate for broker.example was accepted for 127.0.0.1", name)
		}
	}
}
