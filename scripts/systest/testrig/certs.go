package testrig

import (
	"path/filepath"
	"testing"

	"github.com/bmedge/bmedge/coordinator/certs"
)

// LabCerts makes a CA and a server certificate for hosts in a temporary
// folder, as 'coordinator certs' does (the server file holds the
// certificate followed by the CA).
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
	dir := t.TempDir()
	if err := certs.WriteFiles(dir, ca, srv, false); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, certs.ServerFile), filepath.Join(dir, certs.ServerKeyFile), filepath.Join(dir, certs.CAFile)
}
