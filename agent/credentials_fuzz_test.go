package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadCredentials feeds arbitrary file contents to LoadCredentials,
// which the edge agent runs at start on the file `coordinator site add`
// wrote (or an operator edited). It must refuse, never half-accept: a
// credential it returns names a site, a user and a password.
func FuzzLoadCredentials(f *testing.F) {
	for _, s := range []string{
		`{"site":"site1","username":"site-site1","password":"0123456789abcdef","broker_url":"mqtt://coordinator:1883"}`,
		`{"site":"site1","username":"site-site1","password":"p","broker_url":"mqtts://coordinator:8883","extra":1}`,
		`{"site":"site1","username":"site-site1"}`,
		`{"site":1}`,
		``,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	p := filepath.Join(f.TempDir(), "credentials.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadCredentials(p)
		if err == nil && (c.Site == "" || c.Username == "" || c.Password == "") {
			t.Fatalf("accepted %q as %+v", b, c)
		}
	})
}
