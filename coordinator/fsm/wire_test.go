package fsm

import (
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

var writeWire = flag.Bool("write-wire", false, "write testdata/wire.json from the commands the machine sends now")

// TestWireUnchanged drives nodes through whole lifecycles (with and
// without site plans: manage, inspect, provide, deploy with a config
// drive and root device hints, rescue, unrescue, service, a manual clean
// with burn-in, RAID and hardware checks, undeploy, power) and compares
// every command the machine sent, byte for byte as JSON, with
// testdata/wire.json: what the edge agent and the ramdisk get does not
// change when the machine's code does. -write-wire writes the file anew
// (only for a deliberate change of the wire).
func TestWireUnchanged(t *testing.T) {
	var got []string
	for _, plans := range []bool{false, true} {
		w := newWorld(t)
		if plans {
			w.m.cfg.SitePlans = func(string) bool { return true }
		}
		w.m.cfg.WaitTimeout, w.m.cfg.CommandTimeout = 40*time.Minute, 3*time.Minute
		w.offer = []protocol.Step{{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99, Abortable: true}, {Interface: "deploy", Step: "erase_devices", Priority: 10, Abortable: true},
			{Interface: "deploy", Step: "burnin_cpu", Abortable: true}, {Interface: "deploy", Step: "verify_hardware", Abortable: true}, {Interface: "raid", Step: "create_configuration"},
			{Interface: "deploy", Step: "inspect_hardware", Abortable: true}}
		w.n.DriverInfo = map[string]any{"agent_burnin_cpu_timeout": 5.0, "agent_erase_skip_read_only": true}
		w.n.Properties = map[string]any{"root_device": map[string]any{"serial": "S1"}}
		w.verb(Manage, VerbRequest{})
		w.verb(Inspect, VerbRequest{})
		w.n.Properties["root_device"] = map[string]any{"serial": "S1"}
		w.n.TargetRaidConfig = map[string]any{"logical_disks": []any{map[string]any{"size_gb": "MAX", "raid_level": "1", "controller": "software"}}}
		w.verb(Clean, VerbRequest{CleanSteps: []map[string]any{
			{"interface": "deploy", "step": "burnin_cpu", "args": map[string]any{}},
			{"interface": "deploy", "step": "verify_hardware"},
			{"interface": "raid", "step": "create_configuration"},
			{"interface": "deploy", "step": "erase_devices", "args": map[string]any{}},
		}})
		if w.n.ProvisionState != Manageable {
			t.Fatalf("plans %v: manual clean ended in %s (%s)", plans, w.n.ProvisionState, w.n.LastError)
		}
		w.verb(Provide, VerbRequest{})
		w.n.InstanceInfo = map[string]any{"image_source": "http://x/img", "image_checksum": "sha256:" + strings.Repeat("ab", 32)}
		w.verb(Deploy, VerbRequest{ConfigDrive: "http://x/cd.iso"})
		w.verb(RescueV, VerbRequest{HashedRescuePassword: "$6$rounds=5000$salt$" + strings.Repeat("a", 86)})
		w.verb(Unrescue, VerbRequest{})
		w.verb(Service, VerbRequest{ServiceSteps: []map[string]any{{"interface": "deploy", "step": "burnin_cpu"}, {"interface": "deploy", "step": "verify_hardware"}}})
		out, r := w.m.PowerRequest(w.n, "power off", w.now)
		if r != nil {
			t.Fatal(r.Msg)
		}
		w.run(out)
		w.verb(Undeploy, VerbRequest{})
		if w.n.ProvisionState != Available {
			t.Fatalf("plans %v: ended in %s (%s)", plans, w.n.ProvisionState, w.n.LastError)
		}
		for _, o := range w.sent {
			b, err := json.Marshal(o.Msg)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, o.Topic+" "+string(b))
		}
	}
	text := strings.Join(got, "\n") + "\n"
	if *writeWire {
		if err := os.WriteFile("testdata/wire.json", []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile("testdata/wire.json")
	if err != nil {
		t.Fatal(err)
	}
	if text != string(want) {
		g, wl := strings.Split(text, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(g), len(wl)) {
			if g[i] != wl[i] {
				t.Fatalf("command %d differs:\n got  %s\n want %s", i+1, g[i], wl[i])
			}
		}
		t.Fatalf("%d commands sent, want %d", len(g), len(wl))
	}
}
