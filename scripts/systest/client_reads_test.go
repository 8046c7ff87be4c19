package systest

import (
	"crypto/md5"
	"crypto/sha1"
	"encoding/hex"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestMD5ChecksumAllowed: a coordinator started with
// --allow-md5-checksum (Ironic's [agent]allow_md5_checksum) deploys
// images given by md5 (a bare digest, as Ironic's legacy image_checksum)
// and by sha1 (Glance's image_os_hash_algo/image_os_hash_value) through
// a simulated site with an image cache: the image is fetched and verified
// against that digest, and a wrong md5 fails the deploy saying so.
func TestMD5ChecksumAllowed(t *testing.T) {
	o := newImageOrigin(4 << 20)
	o.open()
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	url := srv.URL + "/image.raw"
	hm, hs := md5.New(), sha1.New()
	o.each(func(b []byte) bool { hm.Write(b); hs.Write(b); return true })
	md5hex, sha1hex := hex.EncodeToString(hm.Sum(nil)), hex.EncodeToString(hs.Sum(nil))

	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{AllowMD5Checksum: true}})
	cl := testrig.NewClient(t, c)
	cacheSite(t, c, "md5site", t.TempDir(), 3)
	ids := availableNodes(t, cl, "md5site", 3)
	setImage(t, cl, ids[0], url, md5hex)
	if code := cl.Do("PATCH", "/v1/nodes/"+ids[1], []map[string]any{
		{"op": "add", "path": "/instance_info/image_source", "value": url},
		{"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha1"},
		{"op": "add", "path": "/instance_info/image_os_hash_value", "value": sha1hex},
	}, nil); code != 200 {
		t.Fatalf("set sha1 image: %d", code)
	}
	wrong := strings.Repeat("0", 32)
	setImage(t, cl, ids[2], url, "md5:"+wrong)
	for _, id := range ids {
		cl.MustVerb(id, "active", nil)
	}
	for i, want := range []string{"active", "active", "deploy failed"} {
		n := cl.WaitRest(ids[i], 2*time.Minute)
		if n.State != want {
			t.Fatalf("node %d (%v): %q, last_error %q; want %q", i, n.InstanceInfo, n.State, n.LastError, want)
		}
		if want == "deploy failed" && (!strings.Contains(n.LastError, "md5") || !strings.Contains(n.LastError, wrong)) {
			t.Errorf("wrong md5: last_error %q; want the md5 mismatch named", n.LastError)
		}
	}
}

// powerLog records the simulated BMCs' power changes.
type powerLog struct {
	mu      sync.Mutex
	changes map[string][]string
}

func (p *powerLog) watch(node, state, _ string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changes[node] = append(p.changes[node], state)
}

func (p *powerLog) of(node string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.changes[node])
}

// TestVerbsReadAsIronic: what a client reads after a verb, as Ironic has
// it, on a simulated site. Right after manage (its verify) the node's
// power_state is the BMC's, read by the verify (a simulated BMC starts
// powered off and nothing powered it); after inspect, the inventory's
// NICs carry the MACs of the node's enrolled ports.
func TestVerbsReadAsIronic(t *testing.T) {
	power := &powerLog{changes: map[string][]string{}}
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "site1", agent.SimOptions{Nodes: 1, StepDuration: 50 * time.Millisecond, BootDelay: 50 * time.Millisecond, PowerWatch: power.watch})
	id := cl.CreateNode("reads1", "site1", nil)
	macs := []string{"52:54:00:aa:00:01", "52:54:00:aa:00:02"}
	for _, mac := range macs {
		if code := cl.Do("POST", "/v1/ports", map[string]any{"node_uuid": id, "address": mac}, nil); code != 201 {
			t.Fatalf("port create %s: %d", mac, code)
		}
	}
	if n := cl.Get(id); n.PowerState != "" {
		t.Fatalf("enrolled node's power_state %q before anything read its BMC; want null", n.PowerState)
	}
	cl.MustVerb(id, "manage", nil)
	if n := cl.WaitRest(id, 30*time.Second); n.State != "manageable" {
		t.Fatalf("manage: %q (%q)", n.State, n.LastError)
	}
	if ch := power.of(id); len(ch) != 0 {
		t.Fatalf("manage changed the BMC's power: %v", ch)
	}
	if n := cl.Get(id); n.PowerState != "power off" {
		t.Errorf("power_state right after manage: %q; want the simulated BMC's, power off", n.PowerState)
	}

	cl.MustVerb(id, "inspect", nil)
	if n := cl.WaitRest(id, 60*time.Second); n.State != "manageable" {
		t.Fatalf("inspect: %q (%q)", n.State, n.LastError)
	}
	var inv struct {
		Inventory struct {
			Interfaces []struct {
				MAC string `json:"mac_address"`
			} `json:"interfaces"`
		} `json:"inventory"`
	}
	if code := cl.Do("GET", "/v1/nodes/"+id+"/inventory", nil, &inv); code != 200 {
		t.Fatalf("inventory: %d", code)
	}
	var got []string
	for _, i := range inv.Inventory.Interfaces {
		got = append(got, i.MAC)
	}
	slices.Sort(got)
	if !slices.Equal(got, macs) {
		t.Errorf("inventory interfaces' MACs %v; want the ports' %v", got, macs)
	}
	var ports struct {
		Ports []map[string]any `json:"ports"`
	}
	if code := cl.Do("GET", "/v1/ports?node="+id, nil, &ports); code != 200 || len(ports.Ports) != len(macs) {
		t.Errorf("ports after inspect: %d %v; want the two enrolled, no other", code, ports.Ports)
	}
	if n := cl.Get(id); n.PowerState != "power off" {
		t.Errorf("power_state after inspect: %q; want power off", n.PowerState)
	}
}
