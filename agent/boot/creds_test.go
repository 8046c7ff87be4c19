package boot

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/protocol"
)

// TestBootCredentialLifecycle: a boot command's credential is what the
// site broker admits for the node (kept hashed in the state folder);
// the command line given to a qemu-dev ramdisk carries it and the
// broker; a command that ends the boot (power off, or a tear_down_agent
// step that succeeded), end_boot and forget each take it back, tell the
// relay (Dropped) and remove it from the state folder. No MQTT.
func TestBootCredentialLifecycle(t *testing.T) {
	kept := map[string]bool{}
	var dropped []string
	p := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler), QEMUBrokerURL: "mqtts://10.0.2.2:8883", CAPin: "sha256:pin",
		Info:    func(string) map[string]any { return map[string]any{"qemu_cmdline": "bm.ip=dhcp"} },
		PutCred: func(node string, h []byte) { kept[node] = h != nil },
		Dropped: func(node string) { dropped = append(dropped, node) }})
	boot := func(node, pw string) {
		p.NoteArgs(node, map[string]any{protocol.ArgAgentUsername: "node:" + node, protocol.ArgAgentPassword: pw})
	}
	boot("n1", "pw1")
	if err := p.Admit("n1", "pw1"); err != nil || !kept["n1"] {
		t.Fatalf("after the boot command: admit %v, kept %v", err, kept["n1"])
	}
	if err := p.Admit("n1", "other"); err == nil {
		t.Fatal("a wrong password was admitted")
	}
	line := p.RamdiskCmdline("n1")
	for _, want := range []string{"bm.node=n1", "bm.user=node:n1", "bm.password=pw1", "bm.broker=mqtts://10.0.2.2:8883", "bm.ca=sha256:pin"} {
		if !strings.Contains(line, want) {
			t.Errorf("ramdisk command line %q lacks %q", line, want)
		}
	}
	if !strings.HasSuffix(line, " bm.ip=dhcp") {
		t.Errorf("the node's own qemu_cmdline does not come last: %q", line)
	}
	// A new boot replaces the credential.
	boot("n1", "pw2")
	if p.Admit("n1", "pw1") == nil || p.Admit("n1", "pw2") != nil {
		t.Fatal("the new boot's credential did not replace the old one")
	}
	// A power on does not end the boot; a failed tear_down_agent neither.
	p.Ended(&protocol.Message{Node: "n1", Action: protocol.ActionPower, Args: map[string]any{"state": protocol.PowerOn}}, 0)
	steps := []protocol.Step{{Interface: "deploy", Step: "tear_down_agent"}}
	p.Ended(&protocol.Message{Node: "n1", Action: protocol.ActionOOBStep, Step: &steps[0], Steps: steps}, 0)
	if p.Admit("n1", "pw2") != nil || len(dropped) != 0 {
		t.Fatalf("the boot ended without a command ending it (dropped %v)", dropped)
	}
	p.Ended(&protocol.Message{Node: "n1", Action: protocol.ActionOOBStep, Step: &steps[0], Steps: steps}, 1)
	if p.Admit("n1", "pw2") == nil || kept["n1"] || len(dropped) != 1 {
		t.Fatalf("after tear_down_agent: still admitted, kept %v, dropped %v", kept["n1"], dropped)
	}
	boot("n2", "pw")
	p.End("n2")
	if p.Admit("n2", "pw") == nil || kept["n2"] {
		t.Fatal("end_boot left the credential")
	}
	boot("n3", "pw")
	p.Forget("n3")
	if p.Admit("n3", "pw") == nil || kept["n3"] {
		t.Fatal("forget left the credential")
	}
}
