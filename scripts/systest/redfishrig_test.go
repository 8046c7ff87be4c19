package systest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// redfishRig is one redfish node, rf1, behind the virtual Redfish BMC, at
// site rack1 whose edge agent runs in real mode with a stand-in for the
// ramdisk ISO (mediaRamdiskMachine boots it from the virtual CD), with an
// image set in instance_info: enrolled, not yet managed.
type redfishRig struct {
	m     *mediaRamdiskMachine
	b     *vbmc.BMC
	srv   *vbmc.Server
	sysID string
	c     *server.Coordinator
	cl    *testrig.Client
	id    string
}

func newRedfishRig(t *testing.T) *redfishRig {
	t.Helper()
	dir := t.TempDir()
	iso := filepath.Join(dir, "bmramdisk.iso")
	if err := os.WriteFile(iso, bytes.Repeat([]byte("ramdisk ISO "), 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &redfishRig{m: &mediaRamdiskMachine{MemoryMachine: vbmc.NewMemoryMachine(vbmc.MemoryOptions{}), t: t}}
	var err error
	if r.b, err = vbmc.New(vbmc.Config{Username: "root", Password: "calvin", Systems: []vbmc.SystemConfig{{Machine: r.m}}}); err != nil {
		t.Fatal(err)
	}
	if r.srv, err = vbmc.Serve(r.b, vbmc.ServeOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.srv.Close(); r.m.close(); r.b.Close() })
	r.sysID = r.b.SystemIDs()[0]

	r.c = testrig.Coordinator(t, testrig.Options{})
	r.cl = testrig.NewClient(t, r.c)
	var creds agent.Credentials
	if code := r.cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{Ramdisk: agent.RamdiskOptions{ISO: iso, Listen: "127.0.0.1:0", BrokerURL: r.c.BrokerURL}})

	info := map[string]any{"redfish_address": r.srv.URL, "redfish_username": "root", "redfish_password": "calvin"}
	var n testrig.Node
	if code := r.cl.Do("POST", "/v1/nodes", map[string]any{"name": "rf1", "driver": "redfish", "conductor_group": "rack1", "driver_info": info}, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	r.id = n.UUID
	patch := []map[string]any{{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:1/img.raw"},
		{"op": "add", "path": "/instance_info/image_checksum", "value": strings.Repeat("ab", 32)}}
	if code := r.cl.Do("PATCH", "/v1/nodes/"+r.id, patch, nil); code != 200 {
		t.Fatalf("patch instance_info: %d", code)
	}
	return r
}
