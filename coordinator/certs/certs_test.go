package certs_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/coordinator/certs"
)

func makePair(t *testing.T, hosts ...string) (ca, srv *certs.Pair) {
	t.Helper()
	ca, err := certs.MakeCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err = certs.MakeServerCert(ca, hosts)
	if err != nil {
		t.Fatal(err)
	}
	return ca, srv
}

// TestServerCertVerifies checks that the server certificate is valid for
// each default name under the CA, and for nothing else.
func TestServerCertVerifies(t *testing.T) {
	ca, srv := makePair(t)
	if !ca.Cert.IsCA || !ca.Cert.MaxPathLenZero || ca.Cert.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("CA: IsCA %v MaxPathLenZero %v key %v", ca.Cert.IsCA, ca.Cert.MaxPathLenZero, ca.Cert.PublicKeyAlgorithm)
	}
	if srv.Cert.IsCA || srv.Key.Curve.Params().Name != "P-256" {
		t.Fatalf("server cert: IsCA %v curve %s", srv.Cert.IsCA, srv.Key.Curve.Params().Name)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, h := range []string{"localhost", "127.0.0.1", "::1", "10.0.2.2"} {
		if _, err := srv.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: h}); err != nil {
			t.Errorf("server cert not valid for %s: %v", h, err)
		}
	}
	if _, err := srv.Cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com"}); err == nil {
		t.Error("server cert is valid for example.com, which it was not made for")
	}
	other, _ := makePair(t)
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(other.Cert)
	if _, err := srv.Cert.Verify(x509.VerifyOptions{Roots: otherRoots, DNSName: "localhost"}); err == nil {
		t.Error("server cert verifies under a CA that did not sign it")
	}
}

func TestHosts(t *testing.T) {
	_, srv := makePair(t, "coord.example", "192.0.2.7")
	if len(srv.Cert.DNSNames) != 1 || srv.Cert.DNSNames[0] != "coord.example" || len(srv.Cert.IPAddresses) != 1 ||
		!srv.Cert.IPAddresses[0].Equal(net.ParseIP("192.0.2.7")) {
		t.Fatalf("SANs: %v %v", srv.Cert.DNSNames, srv.Cert.IPAddresses)
	}
	ca, _ := makePair(t)
	for _, bad := range []string{"", "http://x", "a b"} {
		if _, err := certs.MakeServerCert(ca, []string{bad}); err == nil {
			t.Errorf("host %q was accepted", bad)
		}
	}
}

// TestPin checks Pin against an independent computation, and against
// openssl's when it is installed.
func TestPin(t *testing.T) {
	ca, srv := makePair(t)
	der, err := x509.MarshalPKIXPublicKey(&ca.Key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	want := base64.RawURLEncoding.EncodeToString(sum[:])
	got := certs.Pin(ca.Cert)
	if got != want || len(got) != 43 || strings.ContainsAny(got, "+/=") {
		t.Fatalf("Pin = %q, want %q (43 characters of base64url, no padding)", got, want)
	}
	if certs.Pin(srv.Cert) == got {
		t.Fatal("server and CA have the same pin")
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Log("openssl is not installed; pin not checked against it")
		return
	}
	cmd := exec.Command("sh", "-c", "openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -binary | base64")
	cmd.Stdin = bytes.NewReader(ca.CertPEM())
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	std := strings.TrimSpace(string(out))
	url := strings.TrimRight(strings.NewReplacer("+", "-", "/", "_").Replace(std), "=")
	if url != got {
		t.Fatalf("openssl's pin %s (base64url %s), ours %s", std, url, got)
	}
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// TestWriteFiles writes the four files, serves TLS with them to a client
// that trusts ca.pem, refuses to overwrite, and with force replaces them
// with keys that are 0600 even where an old file was readable.
func TestWriteFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	ca, srv := makePair(t)
	if err := certs.WriteFiles(dir, ca, srv, false); err != nil {
		t.Fatal(err)
	}
	paths := certs.Files(dir)
	for i, want := range []os.FileMode{0o644, 0o600, 0o644, 0o600} {
		if m := mode(t, paths[i]); m != want {
			t.Errorf("%s: mode %v, want %v", paths[i], m, want)
		}
	}
	pair, err := tls.LoadX509KeyPair(paths[2], paths[3])
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	ts.StartTLS()
	defer ts.Close()
	read, err := certs.ReadCertFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	if certs.Pin(read) != certs.Pin(ca.Cert) {
		t.Fatal("ca.pem read back has another pin")
	}
	roots := x509.NewCertPool()
	roots.AddCert(read)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := cl.Get(ts.URL)
	if err != nil {
		t.Fatalf("client trusting ca.pem: %v", err)
	}
	resp.Body.Close()
	if _, err := http.Get(ts.URL); err == nil {
		t.Fatal("a client with the system roots trusted the lab CA")
	}

	before, _ := os.ReadFile(paths[0])
	ca2, srv2 := makePair(t)
	if err := certs.WriteFiles(dir, ca2, srv2, false); !errors.Is(err, certs.ErrExist) {
		t.Fatalf("second write without force: %v, want ErrExist", err)
	}
	if after, _ := os.ReadFile(paths[0]); !bytes.Equal(before, after) {
		t.Fatal("a refused write changed ca.pem")
	}
	if err := os.Chmod(paths[1], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteFiles(dir, ca2, srv2, true); err != nil {
		t.Fatal(err)
	}
	if m := mode(t, paths[1]); m != 0o600 {
		t.Fatalf("ca-key.pem after --force: mode %v, want 0600", m)
	}
	if after, _ := os.ReadFile(paths[0]); bytes.Equal(before, after) {
		t.Fatal("force did not replace ca.pem")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 4 {
		t.Fatalf("%d files in the folder, want 4 (temporary files left?)", len(ents))
	}
}
