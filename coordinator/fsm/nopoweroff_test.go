package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// powerLog is the plan actions of a log as "power S" and "boot D" words.
func powerOffs(log []string) int {
	k := 0
	for _, l := range log {
		if l == "power "+protocol.PowerOff || l == "power "+protocol.PowerSoftOff {
			k++
		}
	}
	return k
}

// TestWithoutPowerOff: the rewrite of a plan's power-off, rule by rule.
func TestWithoutPowerOff(t *testing.T) {
	name := func(p []Action) string {
		var w []string
		for _, a := range p {
			switch {
			case a.Kind == ActOOB && a.Action == protocol.ActionPower:
				w = append(w, "power "+protocol.PowerArgsOf(a.Args).State)
			case a.Kind == ActOOB && a.Action == protocol.ActionBootDev:
				w = append(w, "boot "+protocol.BootDeviceArgsOf(a.Args).Device)
			default:
				w = append(w, string(a.Kind))
			}
		}
		return strings.Join(w, ",")
	}
	iso := &Node{InstanceInfo: map[string]any{BootISOField: "http://x/live.iso"}}
	for _, c := range []struct {
		what string
		plan []Action
		want string
	}{
		{"power off and on (the ramdisk deploy)", bootISOPlan(iso), "boot iso,power rebooted"},
		{"power off and on (unrescue, service)", bootInstance(), "boot disk,power rebooted"},
		{"the end of a ramdisk boot", []Action{{Kind: ActStep}, endRamdisk()}, "step,boot disk,power rebooted"},
		{"undeploy", []Action{powerAction(protocol.PowerOff)}, "power rebooted"},
		{"the ramdisk deploy's tear down", ejectISOPlan(), "boot disk,power rebooted"},
	} {
		i := 0
		for i < len(c.plan) && !isPowerOff(c.plan[i]) {
			i++
		}
		if got := name(withoutPowerOff(c.plan, i)); got != c.want {
			t.Errorf("%s: %s; want %s", c.what, got, c.want)
		}
	}
	// The power-on's own arguments are kept on the reboot.
	on := powerAction(protocol.PowerOn)
	on.Args[protocol.ArgBootDevice] = protocol.BootDisk
	got := withoutPowerOff([]Action{powerAction(protocol.PowerOff), on}, 0)
	if p := protocol.PowerArgsOf(got[0].Args); len(got) != 1 || p.State != protocol.PowerReboot || p.BootDevice != protocol.BootDisk {
		t.Errorf("power off, power on with boot device: %+v", got)
	}
}

// TestDisablePowerOffNeverPowersOff: a node with disable_power_off goes
// through inspection, cleaning, rescue and unrescue, a ramdisk deploy and
// its undeploy, and a fast track window that ends, and no command powers
// it off; an operator's power off is refused (409) and a reboot is taken.
func TestDisablePowerOffNeverPowersOff(t *testing.T) {
	w := fastWorld(t, false)
	w.n.Driver = "redfish"
	w.n.DriverInfo = map[string]any{"redfish_address": "http://127.0.0.1:9", "redfish_username": "u", "redfish_password": "p"}
	w.n.DisablePowerOff = true
	w.verb(Manage, VerbRequest{})
	w.verb(Inspect, VerbRequest{})
	w.want(Manageable)
	w.verb(Provide, VerbRequest{})
	w.want(Available)
	w.n.InstanceInfo = map[string]any{"image_source": "http://x/img"}
	w.verb(Deploy, VerbRequest{})
	w.want(Active)
	w.verb(RescueV, VerbRequest{HashedRescuePassword: "$6$saltstring$xwVXmdoFwkuFfkvrCnFqepsb1G.0z7.VoLCq69.god.O.zXvYSQsLM/oDMuI05ufmibO/tzUYEh4IPt9kZAc0."})
	w.want(Rescue)
	w.log = nil
	w.verb(Unrescue, VerbRequest{})
	w.want(Active)
	if got := strings.Join(w.log, ","); got != "boot disk,power rebooted" {
		t.Fatalf("unrescue ran %s; want the boot device disk and a reboot", got)
	}
	w.verb(Undeploy, VerbRequest{})
	w.want(Available)

	w.n.DeployInterface = drivers.DeployRamdisk
	w.n.InstanceInfo = map[string]any{BootISOField: "http://images.example/live.iso"}
	w.log = nil
	w.verb(Deploy, VerbRequest{})
	w.want(Active)
	if got := strings.Join(w.log, ","); got != "boot iso,power rebooted" {
		t.Fatalf("ramdisk deploy ran %s; want the ISO as boot device and a reboot", got)
	}
	w.log = nil
	off := false
	w.n.AutomatedClean = &off
	w.verb(Undeploy, VerbRequest{})
	w.want(Available)
	if got := strings.Join(w.log, ","); got != "boot disk,power rebooted" {
		t.Fatalf("ramdisk undeploy ran %s; want the ISO ejected, the disk, a reboot", got)
	}
	if n := powerOffs(w.log); n != 0 {
		t.Fatalf("%d power-offs", n)
	}

	for _, target := range []string{protocol.PowerOff, PowerTargetSoftOff} {
		_, r := w.m.PowerRequest(w.n, target, w.now)
		if r == nil || r.httpCode() != 409 || !strings.HasPrefix(r.Msg, "Failed to set node power state to "+target+".") {
			t.Fatalf("power %s: %+v; want Ironic's 409 PowerStateFailure", target, r)
		}
	}
	out, r := w.m.PowerRequest(w.n, PowerTargetReboot, w.now)
	if r != nil {
		t.Fatalf("reboot refused: %s", r.Msg)
	}
	w.noAgent = true
	w.run(out)
	w.noAgent = false

	// Power-state sync records the BMC's off, and never forces.
	w.n.PowerState = protocol.PowerOn
	rep := w.m.PowerReport(w.n, &protocol.Message{Sent: w.now.Add(time.Hour), PowerState: protocol.PowerOff}, w.now)
	if w.n.Op != nil || len(rep.Send) != 0 || w.n.PowerState != protocol.PowerOff {
		t.Fatalf("power sync forced the power of a disable_power_off node: %+v", rep.Send)
	}
	w.n.PowerState = protocol.PowerOn
	if powerOffs(w.log) != 0 {
		t.Fatalf("a power-off was sent: %v", w.log)
	}
}

// TestDisablePowerOffFastTrackExpiry: a kept ramdisk whose window ends
// is ended by the boot device disk and a reboot, not a power-off.
func TestDisablePowerOffFastTrackExpiry(t *testing.T) {
	w := fastWorld(t, true)
	w.n.DisablePowerOff = true
	w.verb(Manage, VerbRequest{})
	w.verb(Inspect, VerbRequest{})
	w.want(Manageable)
	if w.n.FastTrackUntil.IsZero() {
		t.Fatal("the ramdisk was not kept")
	}
	w.log = nil
	w.now = w.n.FastTrackUntil.Add(time.Second)
	w.noAgent = true
	w.run(w.m.fastTrackExpire(w.n, w.now, true))
	if got := strings.Join(w.log, ","); got != "boot disk,power rebooted" {
		t.Fatalf("fast track expiry ran %s; want the boot device disk and a reboot", got)
	}
	if w.n.AgentToken != "" || w.n.Op != nil {
		t.Fatalf("after the expiry: token %q, op %+v", w.n.AgentToken, w.n.Op)
	}
}

// TestDisablePowerOffSecureBootUndeploy: the undeploy of a node that
// asked for Secure Boot turns it off with its tear down's power command;
// under disable_power_off that command is a reboot, which still says
// secure_boot false (not the true of the node's other boots).
func TestDisablePowerOffSecureBootUndeploy(t *testing.T) {
	w := newWorld(t)
	w.n.DisablePowerOff = true
	w.n.Properties = map[string]any{"capabilities": "secure_boot:true"}
	w.verb(Manage, VerbRequest{})
	w.verb(Provide, VerbRequest{})
	w.n.InstanceInfo = map[string]any{"image_source": "http://x/img"}
	w.verb(Deploy, VerbRequest{})
	w.want(Active)
	off := false
	w.n.AutomatedClean = &off
	w.sent = nil
	w.verb(Undeploy, VerbRequest{})
	w.want(Available)
	var power []map[string]any
	for _, o := range w.sent {
		if o.Msg.Action == protocol.ActionPower {
			power = append(power, o.Msg.Args)
		}
	}
	if len(power) != 1 || protocol.PowerArgsOf(power[0]).State != protocol.PowerReboot || power[0][protocol.ArgSecureBoot] != false {
		t.Fatalf("undeploy's power commands %v; want one reboot with secure_boot false", power)
	}
}
