package fsm

import (
	"strings"
	"testing"

	"github.com/bmedge/bmedge/protocol"
)

// TestVMediaRequests: an attach and a detach are one vmedia command each,
// the node locked meanwhile; the node keeps what is attached and the
// BMC's reading; refusals are Ironic's (400 for a hardware type without
// virtual media, 409 for a locked node); undeploy detaches what is
// attached, before the reboot of a node with disable_power_off.
func TestVMediaRequests(t *testing.T) {
	w := newWorld(t)
	w.n.Driver = "redfish"
	w.n.DriverInfo = map[string]any{"redfish_address": "http://127.0.0.1:9", "redfish_username": "u", "redfish_password": "p"}
	w.verb(Manage, VerbRequest{})
	attach := protocol.VMediaArgs{Op: protocol.VMediaAttach, DeviceType: protocol.VMediaCDROM, ImageURL: "http://images.example/data.iso"}
	out, r := w.m.VMediaRequest(w.n, attach, w.now)
	if r != nil {
		t.Fatalf("attach refused: %s", r.Msg)
	}
	if !w.n.Locked() || len(out.Send) != 1 || out.Send[0].Msg.Action != protocol.ActionVMedia {
		t.Fatalf("attach: locked %v, sent %+v", w.n.Locked(), out.Send)
	}
	if err := out.Send[0].Msg.Validate(); err != nil {
		t.Fatalf("the vmedia command is not valid: %v", err)
	}
	if _, r := w.m.VMediaRequest(w.n, attach, w.now); r == nil || r.httpCode() != 409 || !strings.Contains(r.Msg, "is locked by host") {
		t.Fatalf("attach while locked: %+v; want Ironic's 409 NodeLocked", r)
	}
	reading := []any{map[string]any{"media_types": []any{"CD"}, "inserted": true, "image": attach.ImageURL}}
	w.run(w.m.Result(w.n, &protocol.Message{CommandID: out.Send[0].Msg.ID, OK: true, Data: map[string]any{protocol.DataVirtualMedia: reading}}, w.now))
	if w.n.Locked() || len(w.n.VMediaAttached) != 1 || w.n.VMediaAttached[0] != protocol.VMediaCDROM {
		t.Fatalf("after the attach: locked %v, attached %v", w.n.Locked(), w.n.VMediaAttached)
	}
	if l, r := w.m.VirtualMediaRead(w.n); r != nil || len(l) != 1 || l[0]["inserted"] != true {
		t.Fatalf("GET after the attach: %v %+v", l, r)
	}

	ipmi := &Node{UUID: "u2", Name: "i1", Driver: "ipmi", ProvisionState: Manageable}
	if _, r := w.m.VMediaRequest(ipmi, attach, w.now); r == nil || r.httpCode() != 400 || !strings.HasPrefix(r.Msg, "Driver ipmi does not support attach_virtual_media (disabled or not implemented).") {
		t.Fatalf("attach on ipmi: %+v; want Ironic's UnsupportedDriverExtension", r)
	}
	if _, r := w.m.VirtualMediaRead(ipmi); r == nil || r.httpCode() != 400 || !strings.Contains(r.Msg, "get_virtual_media") {
		t.Fatalf("GET on ipmi: %+v", r)
	}

	// Undeploy of a node with the image attached: power off, detach.
	w.verb(Provide, VerbRequest{})
	w.n.InstanceInfo = map[string]any{"image_source": "http://x/img"}
	w.verb(Deploy, VerbRequest{})
	w.want(Active)
	off := false
	w.n.AutomatedClean = &off
	w.log, w.sent = nil, nil
	w.verb(Undeploy, VerbRequest{})
	w.want(Available)
	if got := strings.Join(w.log, ","); got != "power power off,vmedia" {
		t.Fatalf("undeploy ran %s", got)
	}
	detached := false
	for _, o := range w.sent {
		if o.Msg.Action == protocol.ActionVMedia && protocol.VMediaArgsOf(o.Msg.Args).Op == protocol.VMediaDetach {
			detached = true
		}
	}
	if !detached || len(w.n.VMediaAttached) != 0 {
		t.Fatalf("undeploy did not detach the operator's media: sent %d, attached %v", len(w.sent), w.n.VMediaAttached)
	}

	// With disable_power_off: the detach, then a reboot.
	plan := withoutPowerOff(append([]Action{powerAction(protocol.PowerOff)}, detachVMedia(&Node{VMediaAttached: []string{"cdrom"}})...), 0)
	if len(plan) != 2 || plan[0].Action != protocol.ActionVMedia || protocol.PowerArgsOf(plan[1].Args).State != protocol.PowerReboot {
		t.Fatalf("undeploy with disable_power_off: %+v", plan)
	}
}
