package systest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

func distinct(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// TestSecretsAtRest runs a node with a BMC password through a whole
// cycle with a rescue (and its password) on a simulated site, stops the
// coordinator, and searches every byte of every file in its data folder:
// neither password, nor the site's MQTT password, may be found, and the
// files must be private (0600, folders 0700).
func TestSecretsAtRest(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	c, err := server.Start(context.Background(), server.Options{DataDir: data, APIListen: "127.0.0.1:0", MQTTListen: testrig.FreeAddr(t),
		Machine:      fsm.Config{WaitTimeout: 30 * time.Second, CommandTimeout: 20 * time.Second, ResendInterval: 500 * time.Millisecond, AutomatedClean: true},
		TickInterval: 100 * time.Millisecond, Log: testrig.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(c.Close) }
	t.Cleanup(stop)

	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, &creds); code != 201 || creds.Password == "" {
		t.Fatalf("site add: %d, password %q", code, creds.Password)
	}
	testrig.StartAgent(t, creds, agent.SimOptions{Nodes: 2, StepDuration: 50 * time.Millisecond})

	bmcPassword := distinct(t, "S3cret-BMC-")
	rescuePassword := distinct(t, "S3cret-Rescue-")
	id := cl.CreateNode("n1", "site1", map[string]any{"fake_password": bmcPassword})
	step := func(verb, want string, extra map[string]any) {
		t.Helper()
		cl.MustVerb(id, verb, extra)
		if n := cl.WaitRest(id, 20*time.Second); n.State != want {
			t.Fatalf("%s: %q, want %q (last_error %q)", verb, n.State, want, n.LastError)
		}
	}
	step("manage", "manageable", nil)
	step("provide", "available", nil)
	if code := cl.Do("PATCH", "/v1/nodes/n1", []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/img"}}, nil); code != 200 {
		t.Fatalf("set image: %d", code)
	}
	step("active", "active", nil)
	step("rescue", "rescue", map[string]any{"rescue_password": rescuePassword})
	step("unrescue", "active", nil)
	step("deleted", "available", nil)

	stop()
	secrets := map[string]string{"BMC password": bmcPassword, "rescue password": rescuePassword, "site MQTT password": creds.Password}
	files := 0
	err = filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			if fi.Mode().Perm() != 0o700 {
				t.Errorf("folder %s has mode %04o, want 0700", path, fi.Mode().Perm())
			}
			return nil
		}
		files++
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("file %s has mode %04o, want 0600", path, fi.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for what, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("the %s is in the clear in %s", what, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 4 {
		t.Fatalf("only %d files in the data folder: the search looked at nothing", files)
	}
}
