package testrig

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/bmedge/bmedge/coordinator/certs"
)

// LabCerts makes a CA and a server certificate for hosts in a temporary
// folder. The server file holds the certificate followed by the CA, as a
// client that knows the CA only by pin (the ramdisk) needs.
func LabCerts(t testing.TB, hosts ...string) (certFile, keyFile, caFile string) {
	t.Helper()
	ca, err := certs.MakeCA("lab CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := certs.MakeServerCert(ca, hosts)
	if err != nil {
		t.Fatal(err)
	}
	key, err := srv.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, caFile = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"), filepath.Join(dir, "ca.pem")
	for f, b := range map[string][]byte{certFile: append(srv.CertPEM(), ca.CertPEM()...), keyFile: key, caFile: ca.CertPEM()} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile, caFile
}
