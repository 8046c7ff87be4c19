package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/coordinator/configdrive"
)

// TestDeployConfigDrive: node deploy and rebuild take --config-drive in
// the forms Ironic's clients take (a JSON object, a directory built into
// an ISO 9660 config-2 image, a file, an http(s) URL) and send it as the
// provision body's configdrive; what is none of them is a usage error
// with no request.
func TestDeployConfigDrive(t *testing.T) {
	dir := t.TempDir()
	meta := `{"uuid": "u1", "hostname": "web-1", "public_keys": {"k": "ssh-ed25519 AAAA test"}}`
	cd := filepath.Join(dir, "cd")
	if err := os.MkdirAll(filepath.Join(cd, "openstack", "latest"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cd, "openstack", "latest", "meta_data.json"), []byte(meta), 0o600); err != nil {
		t.Fatal(err)
	}
	jsonFile := filepath.Join(dir, "cd.json")
	if err := os.WriteFile(jsonFile, []byte(`{"meta_data": {"hostname": "web-2"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	send := func(verb, value string) map[string]any {
		t.Helper()
		f := &fakeAPI{states: []map[string]any{node("active", "")}}
		f.start(t)
		code, out, errOut := runHere(context.Background(), "node", verb, "n1", "--config-drive", value)
		if code != 0 || len(f.bodies) != 1 {
			t.Fatalf("node %s --config-drive %s: exit %d, %d requests; stdout %q stderr %q", verb, value, code, len(f.bodies), out, errOut)
		}
		return f.bodies[0]
	}

	b := send("deploy", `{"meta_data": {"hostname": "web-0"}, "user_data": "#cloud-config\n"}`)
	want := map[string]any{"target": "active", "configdrive": map[string]any{"meta_data": map[string]any{"hostname": "web-0"}, "user_data": "#cloud-config\n"}}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("JSON form: sent %v, want %v", b, want)
	}
	b = send("rebuild", jsonFile)
	want = map[string]any{"target": "rebuild", "configdrive": map[string]any{"meta_data": map[string]any{"hostname": "web-2"}}}
	if !reflect.DeepEqual(b, want) {
		t.Errorf("JSON file: sent %v, want %v", b, want)
	}
	b = send("deploy", "https://images.example/cd.iso.gz")
	if b["configdrive"] != "https://images.example/cd.iso.gz" {
		t.Errorf("URL form: sent %v", b)
	}

	// A directory: an ISO 9660 image labelled config-2 holding its files,
	// gzipped and base64-encoded.
	b = send("deploy", cd)
	s, _ := b["configdrive"].(string)
	img, err := configdrive.Decode(s)
	if err != nil {
		t.Fatalf("directory form: configdrive %q does not decode: %v", s, err)
	}
	if len(img) < 32774 || string(img[32769:32774]) != "CD001" {
		t.Fatalf("directory form: not an ISO 9660 image (%d bytes)", len(img))
	}
	if !bytes.Contains(img[32768:34816], []byte("config-2")) || !bytes.Contains(img, []byte(meta)) {
		t.Errorf("directory form: the image lacks the label config-2 or meta_data.json's content")
	}
	// The same image given as a file is sent gzipped and base64-encoded.
	iso := filepath.Join(dir, "cd.iso")
	if err := os.WriteFile(iso, img, 0o600); err != nil {
		t.Fatal(err)
	}
	b = send("rebuild", iso)
	if again, err := configdrive.Decode(b["configdrive"].(string)); err != nil || !bytes.Equal(again, img) {
		t.Errorf("ISO file: sent something that does not decode to the file (%v)", err)
	}

	noRequests(t)
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ value, says string }{
		{`{"meta_data": `, "not a valid object"},
		{filepath.Join(dir, "missing"), "neither a JSON object"},
		{empty, "holds no files"},
	} {
		code, _, errOut := runHere(context.Background(), "node", "deploy", "n1", "--config-drive", bad.value)
		if code != 2 || !strings.Contains(errOut, bad.says) {
			t.Errorf("--config-drive %q: exit %d, stderr %q; want 2 saying %q", bad.value, code, errOut, bad.says)
		}
	}
}
