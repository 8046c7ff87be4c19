package cluster

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/certs"
	"github.com/bmedge/bmedge/lib/freeport"
)

// The cluster link takes only member certificates of the cluster's CA:
// openssl s_client (an independent client) without a certificate, with
// the API's server certificate of the same CA, or with a member
// certificate of another CA is refused at the handshake; with a member
// certificate it gets through.
func TestLinkRefusesNonMembers(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed")
	}
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	ca, _ := certs.MakeCA("cluster CA")
	srv, _ := certs.MakeServerCert(ca, []string{"127.0.0.21"})
	if err := certs.WriteFiles(pki, ca, srv, false); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"c1", "c2"} {
		mc, err := certs.MakeMemberCert(ca, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := certs.WriteMember(pki, n, ca, mc, false); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(dir, "other")
	oca, _ := certs.MakeCA("another CA")
	osrv, _ := certs.MakeServerCert(oca, nil)
	om, _ := certs.MakeMemberCert(oca, "c2", nil)
	if err := certs.WriteFiles(other, oca, osrv, false); err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteMember(other, "c2", oca, om, false); err != nil {
		t.Fatal(err)
	}
	cert, key := certs.MemberFiles(pki, "c1")
	tc, err := LoadTLS(cert, key, filepath.Join(pki, certs.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := freeport.Addr("127.0.0.21")
	if err != nil {
		t.Fatal(err)
	}
	if err := InitKeys(filepath.Join(dir, "data")); err != nil {
		t.Fatal(err)
	}
	m, err := Open(Config{Name: "c1", Listen: addr, Peers: []Peer{{Name: "c1", Addr: addr}}, DataDir: filepath.Join(dir, "data"), TLS: tc, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	sclient := func(args ...string) (string, bool) {
		cmd := exec.Command(openssl, append([]string{"s_client", "-connect", addr, "-brief", "-ign_eof", "-CAfile", filepath.Join(pki, certs.CAFile)}, args...)...)
		// The server refuses a missing or wrong certificate right after
		// the handshake (TLS 1.3: an alert the client reads next); a
		// member's connection then closes on the unknown first byte.
		cmd.Stdin = strings.NewReader("x\n")
		done := make(chan struct{})
		var out []byte
		go func() { out, _ = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		s := string(out)
		refused := strings.Contains(s, "alert")
		return s, refused
	}
	if out, refused := sclient(); !refused {
		t.Errorf("no certificate: not refused:\n%s", out)
	}
	if out, refused := sclient("-cert", filepath.Join(pki, certs.ServerFile), "-key", filepath.Join(pki, certs.ServerKeyFile)); !refused {
		t.Errorf("the API's server certificate: not refused:\n%s", out)
	}
	oc, ok := certs.MemberFiles(other, "c2")
	if out, refused := sclient("-cert", oc, "-key", ok); !refused {
		t.Errorf("a member certificate of another CA: not refused:\n%s", out)
	}
	mc, mk := certs.MemberFiles(pki, "c2")
	out, refused := sclient("-cert", mc, "-key", mk)
	if refused || !strings.Contains(out, "CONNECTION ESTABLISHED") {
		t.Errorf("a member certificate: refused:\n%s", out)
	}
}
