package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// TestRamdiskDeployBootsTheISO: a redfish node of the ramdisk deploy
// interface is deployed, as Ironic's RamdiskDeploy, by power off, the
// ISO of instance_info boot_iso inserted as the persistent boot device,
// power on: active with no ramdisk boot and no step. Undeploy powers it
// off, ejects the ISO and sets the disk back, then cleans as for direct
// (the ramdisk boots, the disks are erased).
func TestRamdiskDeployBootsTheISO(t *testing.T) {
	w := newWorld(t)
	w.n.Driver = "redfish"
	w.n.DriverInfo = map[string]any{"redfish_address": "http://127.0.0.1:9", "redfish_username": "u", "redfish_password": "p"}
	w.n.DeployInterface = drivers.DeployRamdisk
	w.verb(Manage, VerbRequest{})
	w.verb(Provide, VerbRequest{})
	w.want(Available)
	w.n.InstanceInfo = map[string]any{BootISOField: "http://images.example/live.iso"}
	w.log, w.sent = nil, nil
	boots := w.boots
	w.verb(Deploy, VerbRequest{})
	w.want(Active)
	if got := strings.Join(w.log, ","); got != "power power off,boot iso,power power on" {
		t.Fatalf("deploy ran %s; want power off, the ISO as boot device, power on", got)
	}
	var insert *protocol.Message
	for _, o := range w.sent {
		if o.Msg.Action == protocol.ActionBootDev {
			insert = o.Msg
		}
	}
	if insert == nil || insert.Args[protocol.ArgISOURL] != "http://images.example/live.iso" {
		t.Fatalf("the boot_device command does not carry the ISO: %+v", insert)
	}
	if err := insert.Validate(); err != nil {
		t.Fatalf("the boot_device command is not valid: %v", err)
	}
	if w.boots != boots || w.n.AgentToken != "" || w.n.BootDevice != protocol.BootISO || w.n.PowerState != protocol.PowerOn {
		t.Fatalf("after the deploy: %d ramdisk boots, token %q, boot device %q, power %q", w.boots-boots, w.n.AgentToken, w.n.BootDevice, w.n.PowerState)
	}
	w.log, w.sent = nil, nil
	w.verb(Undeploy, VerbRequest{})
	w.want(Available)
	if got := strings.Join(w.log, ","); got != "power power off,boot disk,boot pxe,power rebooted,deploy.erase_devices_metadata,deploy.erase_devices,power power off" {
		t.Fatalf("undeploy ran %s; want power off, eject and disk, then the automated clean", got)
	}
	for _, o := range w.sent {
		if o.Msg.Action == protocol.ActionBootDev {
			if o.Msg.Args[protocol.ArgEjectISO] != true {
				t.Fatalf("undeploy's boot_device command does not eject the ISO: %+v", o.Msg.Args)
			}
			if err := o.Msg.Validate(); err != nil {
				t.Fatalf("undeploy's boot_device command is not valid: %v", err)
			}
			break
		}
	}
	if w.n.InstanceInfo != nil {
		t.Fatalf("instance_info kept after undeploy: %v", w.n.InstanceInfo)
	}

	// automated_clean false: undeploy is power off and eject only.
	off := false
	w.n.AutomatedClean = &off
	w.n.InstanceInfo = map[string]any{BootISOField: "https://images.example/live.iso"}
	w.verb(Deploy, VerbRequest{})
	w.want(Active)
	w.log = nil
	w.verb(Undeploy, VerbRequest{})
	w.want(Available)
	if got := strings.Join(w.log, ","); got != "power power off,boot disk" {
		t.Fatalf("undeploy without automated clean ran %s", got)
	}
}

// TestRamdiskDeployRefusals: what a ramdisk deploy would not use, or
// cannot do, is a 400 naming it; validate says the same.
func TestRamdiskDeployRefusals(t *testing.T) {
	m := testMachine(t)
	node := func(info map[string]any) *Node {
		return &Node{UUID: "u1", Name: "n1", Driver: "redfish", Site: "s1", ProvisionState: Available, DeployInterface: drivers.DeployRamdisk,
			DriverInfo:   map[string]any{"redfish_address": "http://127.0.0.1:9", "redfish_username": "u", "redfish_password": "p"},
			InstanceInfo: info}
	}
	iso := "http://images.example/live.iso"
	for _, c := range []struct {
		name string
		n    *Node
		req  VerbRequest
		want string
	}{
		{"no boot_iso", node(nil), VerbRequest{}, "or both kernel and ramdisk"},
		{"boot_iso not a string", node(map[string]any{"boot_iso": 7.0}), VerbRequest{}, "instance_info/boot_iso must be an http"},
		{"kernel without ramdisk", node(map[string]any{"kernel": "http://x/k"}), VerbRequest{}, "or both kernel and ramdisk"},
		{"kernel not http", node(map[string]any{"kernel": "file:///k", "ramdisk": "http://x/r"}), VerbRequest{}, "instance_info/kernel must be an http"},
		{"params with a quote", node(map[string]any{"kernel": "http://x/k", "ramdisk": "http://x/r", "kernel_append_params": `console=ttyS0 x="y"`}), VerbRequest{}, "kernel_append_params"},
		{"params not a string", node(map[string]any{"kernel": "http://x/k", "ramdisk": "http://x/r", "kernel_append_params": 3.0}), VerbRequest{}, "kernel_append_params must be a string"},
		{"kernel and ramdisk with image_source", node(map[string]any{"kernel": "http://x/k", "ramdisk": "http://x/r", "image_source": "http://x/img"}), VerbRequest{}, "instance_info/image_source is set"},
		{"boot_iso not http", node(map[string]any{"boot_iso": "file:///live.iso"}), VerbRequest{}, "http:// or https://"},
		{"image_source too", node(map[string]any{"boot_iso": iso, "image_source": "http://x/img"}), VerbRequest{}, "instance_info/image_source is set"},
		{"kernel beside boot_iso", node(map[string]any{"boot_iso": iso, "kernel": "http://x/k"}), VerbRequest{}, "instance_info/kernel is set beside instance_info/boot_iso"},
		{"config drive", node(map[string]any{"boot_iso": iso}), VerbRequest{ConfigDrive: "H4sI"}, "with a config drive"},
		{"deploy steps", node(map[string]any{"boot_iso": iso}), VerbRequest{DeploySteps: []map[string]any{{"interface": "deploy", "step": "x", "priority": 50}}}, "deploy steps"},
		{"ipmi", &Node{UUID: "u2", Driver: "ipmi", ProvisionState: Available, DeployInterface: drivers.DeployRamdisk,
			InstanceInfo: map[string]any{"boot_iso": iso}}, VerbRequest{}, "needs a Redfish BMC"},
	} {
		c.req.Verb = Deploy
		before := c.n.ProvisionState
		_, r := m.Verb(c.n, c.req, time.Unix(1000, 0))
		if r == nil || r.Reason != Invalid || !strings.Contains(r.Msg, c.want) {
			t.Errorf("%s: refusal %+v; want a 400 saying %q", c.name, r, c.want)
			continue
		}
		if c.n.ProvisionState != before || c.n.Op != nil {
			t.Errorf("%s: the refused deploy moved the node to %s", c.name, c.n.ProvisionState)
		}
		if c.req.ConfigDrive == "" && len(c.req.DeploySteps) == 0 {
			if v := m.Validate(c.n)["deploy"]; v.Result == nil || *v.Result || !strings.Contains(v.Reason, c.want) {
				t.Errorf("%s: validate deploy %+v; want false saying %q", c.name, v, c.want)
			}
		}
	}
	if v := m.Validate(node(map[string]any{"boot_iso": iso}))["deploy"]; v.Result == nil || !*v.Result {
		t.Errorf("validate of a ramdisk node with boot_iso: deploy %+v; want true", v)
	}
	rf, err := m.cfg.Drivers.Get("redfish")
	if err != nil {
		t.Fatal(err)
	}
	if d := rf.InterfacesFor("redfish"); !d.Has("deploy", drivers.DeployRamdisk) || d.Default("deploy") != drivers.DeployDirect {
		t.Errorf("redfish deploy interfaces %v; want direct (default) and ramdisk", d["deploy"])
	}
}

// TestRamdiskDeployKernelRamdisk: without boot_iso, a ramdisk deploy of
// instance_info kernel and ramdisk (Ironic's prepare_boot_iso) sends the
// edge agent both URLs and kernel_append_params to build the ISO of, in
// the same plan: power off, the built ISO as boot device, power on.
func TestRamdiskDeployKernelRamdisk(t *testing.T) {
	w := newWorld(t)
	w.n.Driver = "redfish"
	w.n.DriverInfo = map[string]any{"redfish_address": "http://127.0.0.1:9", "redfish_username": "u", "redfish_password": "p"}
	w.n.DeployInterface = drivers.DeployRamdisk
	w.verb(Manage, VerbRequest{})
	w.verb(Provide, VerbRequest{})
	w.n.InstanceInfo = map[string]any{"kernel": "http://images.example/vmlinuz", "ramdisk": "http://images.example/initrd", RamdiskParamsField: "console=ttyS0 quiet"}
	if v := w.m.Validate(w.n)["deploy"]; v.Result == nil || !*v.Result {
		t.Fatalf("validate deploy: %+v", v)
	}
	w.log, w.sent = nil, nil
	w.verb(Deploy, VerbRequest{})
	w.want(Active)
	if got := strings.Join(w.log, ","); got != "power power off,boot iso,power power on" {
		t.Fatalf("deploy ran %s", got)
	}
	for _, o := range w.sent {
		if o.Msg.Action != protocol.ActionBootDev {
			continue
		}
		b := protocol.BootDeviceArgsOf(o.Msg.Args)
		if b.ISOURL != "" || b.KernelURL != "http://images.example/vmlinuz" || b.RamdiskURL != "http://images.example/initrd" || b.KernelParams != "console=ttyS0 quiet" {
			t.Fatalf("boot_device args %+v", b)
		}
		if err := o.Msg.Validate(); err != nil {
			t.Fatalf("not valid: %v", err)
		}
		return
	}
	t.Fatal("no boot_device command")
}
