package fsm

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/protocol"
)

// TestSecureBootRequested reads Ironic's capabilities in their forms:
// instance_info/capabilities (a map or its JSON text) first, then
// properties/capabilities ("key:value,..." text or a map).
func TestSecureBootRequested(t *testing.T) {
	for _, c := range []struct {
		name       string
		props, ins map[string]any
		want       bool
	}{
		{"none", nil, nil, false},
		{"properties text", map[string]any{"capabilities": "boot_mode:uefi,secure_boot:true"}, nil, true},
		{"properties text, spaces", map[string]any{"capabilities": "boot_mode:uefi, secure_boot: true"}, nil, true},
		{"properties text, false", map[string]any{"capabilities": "boot_mode:uefi,secure_boot:false"}, nil, false},
		{"properties map", map[string]any{"capabilities": map[string]any{"secure_boot": "true"}}, nil, true},
		{"instance_info map", nil, map[string]any{"capabilities": map[string]any{"secure_boot": "true"}}, true},
		{"instance_info JSON", nil, map[string]any{"capabilities": `{"secure_boot": "True"}`}, true},
		{"instance_info bool", nil, map[string]any{"capabilities": map[string]any{"secure_boot": true}}, true},
		{"instance_info false wins", map[string]any{"capabilities": "secure_boot:true"}, map[string]any{"capabilities": map[string]any{"secure_boot": "false"}}, false},
		{"other capability", map[string]any{"capabilities": "boot_mode:uefi"}, nil, false},
	} {
		if got := SecureBootRequested(&Node{Properties: c.props, InstanceInfo: c.ins}); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestBootCommandSecureBoot: the power command that boots a node asked to
// boot with Secure Boot says so; another node's does not carry the
// argument at all.
func TestBootCommandSecureBoot(t *testing.T) {
	for _, sb := range []bool{true, false} {
		w := newWorld(t)
		w.noAgent = true
		w.n.ProvisionState = Manageable
		if sb {
			w.n.Properties = map[string]any{"capabilities": "boot_mode:uefi,secure_boot:true"}
		}
		w.verb(Inspect, VerbRequest{})
		w.want(InspectWait)
		boots := 0
		for _, o := range w.sent {
			if o.Msg.Action != protocol.ActionPower || o.Msg.Args[protocol.ArgBootNonce] == nil {
				continue
			}
			boots++
			v, has := o.Msg.Args[protocol.ArgSecureBoot]
			if sb && v != true {
				t.Errorf("secure boot node: the boot command's %s is %v, want true", protocol.ArgSecureBoot, v)
			}
			if !sb && has {
				t.Errorf("a node without secure_boot: the boot command carries %s=%v", protocol.ArgSecureBoot, v)
			}
		}
		if boots == 0 {
			t.Fatalf("secure_boot %v: no power command booted the node", sb)
		}
	}
}

// TestTakeBootMode: the inventory's boot section sets the node's
// boot_mode and secure_boot; an inventory without them leaves them.
func TestTakeBootMode(t *testing.T) {
	n := &Node{}
	takeBootMode(n, map[string]any{"cpu": 4})
	if n.BootMode != "" || n.SecureBoot != nil {
		t.Fatalf("no boot section: %q %v", n.BootMode, n.SecureBoot)
	}
	takeBootMode(n, map[string]any{"boot": map[string]any{"current_boot_mode": "uefi", "secure_boot": true}})
	if n.BootMode != "uefi" || n.SecureBoot == nil || !*n.SecureBoot {
		t.Fatalf("uefi with secure boot: %q %v", n.BootMode, n.SecureBoot)
	}
	takeBootMode(n, map[string]any{"boot": map[string]any{"current_boot_mode": "floppy"}})
	if n.BootMode != "uefi" || !*n.SecureBoot {
		t.Fatalf("an unknown boot mode and no secure_boot changed them: %q %v", n.BootMode, *n.SecureBoot)
	}
	takeBootMode(n, map[string]any{"boot": map[string]any{"current_boot_mode": "bios", "secure_boot": false}})
	if n.BootMode != "bios" || *n.SecureBoot {
		t.Fatalf("bios: %q %v", n.BootMode, *n.SecureBoot)
	}
}

// TestInstanceSecureBoot: as Ironic's prepare_instance and
// clean_up_instance, a deploy of a node asked to boot with Secure Boot
// (instance_info's capabilities, as Nova and Metal3 give them) has its
// prepare_instance_boot step turn Secure Boot on for the instance
// (secure_boot true in the step's args), and its undeploy's power-off
// turn it off (secure_boot false); then, its instance_info gone, the
// cleaning's ramdisk boot does not ask for Secure Boot. A node that does
// not ask carries the argument nowhere.
func TestInstanceSecureBoot(t *testing.T) {
	for _, sb := range []bool{true, false} {
		w := newWorld(t)
		w.n.ProvisionState = Available
		w.n.InstanceInfo = map[string]any{"image_source": "http://x/img"}
		if sb {
			w.n.InstanceInfo["capabilities"] = map[string]any{"boot_mode": "uefi", "secure_boot": "true"}
		}
		w.verb(Deploy, VerbRequest{})
		w.want(Active)
		var prep []any
		for _, o := range w.sent {
			for _, s := range o.Msg.OOBSteps() {
				if s.Interface+"."+s.Step == "deploy.prepare_instance_boot" {
					v, has := s.Args[protocol.ArgSecureBoot]
					if !has {
						v = "absent"
					}
					prep = append(prep, v)
				}
			}
		}
		want := any("absent")
		if sb {
			want = true
		}
		if len(prep) != 1 || prep[0] != want {
			t.Fatalf("secure_boot %v: prepare_instance_boot's %s: %v, want [%v]", sb, protocol.ArgSecureBoot, prep, want)
		}
		w.sent = nil
		w.verb(Undeploy, VerbRequest{})
		w.want(Available)
		var powers []string
		for _, o := range w.sent {
			if o.Msg.Action != protocol.ActionPower {
				continue
			}
			v, has := o.Msg.Args[protocol.ArgSecureBoot]
			powers = append(powers, fmt.Sprintf("%v:%v", o.Msg.Args["state"], map[bool]any{true: v, false: "absent"}[has]))
		}
		got := strings.Join(powers, ",")
		wantPowers := "power off:absent,rebooted:absent,power off:absent"
		if sb {
			wantPowers = "power off:false,rebooted:absent,power off:absent"
		}
		if got != wantPowers {
			t.Fatalf("secure_boot %v: undeploy's power commands (state:secure_boot) %s, want %s", sb, got, wantPowers)
		}
	}
}
