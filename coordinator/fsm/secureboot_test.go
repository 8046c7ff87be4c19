package fsm

import (
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
