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
