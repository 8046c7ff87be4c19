package fsm

import (
	"fmt"
	"slices"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// This file holds the operator's virtual media (Ironic's API 1.89 and
// 1.93: POST, DELETE and GET /v1/nodes/{node}/vmedia; Metal3's
// dataImage): an attach or a detach is an operation beside the lifecycle
// (PhaseVMedia), one vmedia command to the site's edge agent, which
// fetches the image under its fetch rule and has the BMC insert it. The
// node keeps the device types attached and the BMC's devices as read back
// after the last change; undeploy detaches what is attached, as Ironic's
// clean_up_instance ejects every virtual media device.

// HasVirtualMedia tells whether node n's hardware type has virtual media
// an operator may use: the redfish hardware type (its boot interface
// redfish-virtual-media).
func (m *Machine) HasVirtualMedia(n *Node) bool {
	d, err := m.cfg.Drivers.Get(n.Driver)
	return err == nil && d.InterfacesFor(n.Driver).Has("boot", drivers.BootVirtualMedia)
}

// unsupportedVMedia is Ironic's UnsupportedDriverExtension (a 400) for
// the vmedia call named extension.
func unsupportedVMedia(n *Node, extension string) *Refusal {
	return refuse(Invalid, "Driver %s does not support %s (disabled or not implemented). Virtual media needs a Redfish BMC (driver redfish); node %s has driver %s", n.Driver, extension, n.Ident(), n.Driver)
}

// VirtualMediaRead answers GET /v1/nodes/{node}/vmedia (Ironic's
// get_virtual_media): the BMC's devices as read back after the node's
// last attach or detach ([] before any), or Ironic's 400 for a hardware
// type without virtual media.
func (m *Machine) VirtualMediaRead(n *Node) ([]map[string]any, *Refusal) {
	if !m.HasVirtualMedia(n) {
		return nil, unsupportedVMedia(n, "get_virtual_media")
	}
	if n.VirtualMedia == nil {
		return []map[string]any{}, nil
	}
	return n.VirtualMedia, nil
}

// VMediaRequest attaches (args.Op attach: DeviceType, ImageURL) or
// detaches (DeviceTypes, none for all) virtual media of node n through its
// site's edge agent: refused while the node is locked or under an
// operation (409, Ironic's NodeLocked) and for a hardware type without
// virtual media (400). The node's last_error is cleared, as Ironic's.
func (m *Machine) VMediaRequest(n *Node, args protocol.VMediaArgs, now time.Time) (Output, *Refusal) {
	var out Output
	ext := "attach_virtual_media"
	if args.Op == protocol.VMediaDetach {
		ext = "detach_virtual_media"
	}
	if r := checkIdle(n, "changing its virtual media"); r != nil {
		return out, r
	}
	if !m.HasVirtualMedia(n) {
		return out, unsupportedVMedia(n, ext)
	}
	msg := &protocol.Message{Action: protocol.ActionVMedia, Args: args.Args()}
	if err := checkVMediaArgs(msg); err != nil {
		return out, refuse(Invalid, "%v", err)
	}
	n.Op = &Operation{Verb: "vmedia", Phase: PhaseVMedia, Plan: []Action{{Kind: ActOOB, Action: protocol.ActionVMedia, Args: args.Args()}}, StartedAt: now}
	n.Reservation = m.cfg.Holder
	n.LastError = ""
	out.Changed = true
	m.advance(n, now, &out)
	return out, nil
}

// checkVMediaArgs is the wire contract's check of a vmedia command.
func checkVMediaArgs(msg *protocol.Message) error {
	msg.V, msg.Kind, msg.ID, msg.Node, msg.Deadline = protocol.Version, protocol.KindCommand, "check", "check", time.Unix(1, 0)
	return msg.Validate()
}

// vmediaDone records a vmedia command's success: the device types the
// operator attached, and the BMC's devices as read back.
func vmediaDone(n *Node, cmd *protocol.Message, data map[string]any, now time.Time, out *Output) {
	v := protocol.VMediaArgsOf(cmd.Args)
	switch v.Op {
	case protocol.VMediaAttach:
		if !slices.Contains(n.VMediaAttached, v.DeviceType) {
			n.VMediaAttached = append(slices.Clone(n.VMediaAttached), v.DeviceType)
		}
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "vmedia",
			Event: fmt.Sprintf("Device %s attached to node %s", v.DeviceType, n.UUID)})
	case protocol.VMediaDetach:
		types := v.DeviceTypes
		if len(types) == 0 {
			types = protocol.VMediaDeviceTypes()
		}
		var left []string
		for _, d := range n.VMediaAttached {
			if !slices.Contains(types, d) {
				left = append(left, d)
			}
		}
		n.VMediaAttached = left
		out.History = append(out.History, HistoryEntry{Time: now, Severity: "INFO", EventType: "vmedia",
			Event: fmt.Sprintf("Device(s) %v detached from node %s", types, n.UUID)})
	}
	if l, ok := data[protocol.DataVirtualMedia].([]any); ok {
		read := make([]map[string]any, 0, len(l))
		for _, x := range l {
			if d, ok := x.(map[string]any); ok {
				read = append(read, d)
			}
		}
		n.VirtualMedia = read
	}
}

// detachVMedia is undeploy's eject of what the operator attached (none:
// nothing to do).
func detachVMedia(n *Node) []Action {
	if len(n.VMediaAttached) == 0 {
		return nil
	}
	return []Action{{Kind: ActOOB, Action: protocol.ActionVMedia, Args: protocol.VMediaArgs{Op: protocol.VMediaDetach}.Args()}}
}
