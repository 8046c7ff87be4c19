package api

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers"
)

// inspect_interface (drivers/inspectiface.go): agent, the default, boots
// the ramdisk; the driver's own (redfish, Ironic's RedfishInspect) reads
// the hardware from the BMC. Taken on create and PATCH and kept on the
// node, as raid_interface is; Metal3's baremetal-operator enrolls redfish
// hosts with inspect_interface redfish and PATCHes it to agent after the
// first inspection.

// checkInspectInterface refuses, with Ironic's 400, an inspect_interface
// the driver does not support.
func checkInspectInterface(d drivers.Declaration, impl string) error {
	for _, ok := range d.InspectInterfaces() {
		if impl == ok {
			return nil
		}
	}
	shown := "'" + impl + "'"
	if !ifaceName.MatchString(impl) {
		shown = shortQuote(impl)
	}
	hint := "agent boots the ramdisk to read the hardware"
	if o := d.OOBInspectName(); o != "" {
		hint += ", " + o + " reads it from the BMC (out of band, no ramdisk boot)"
	}
	return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("inspect interface implementation %s is not supported by hardware type %s. It supports %s: %s.",
		shown, d.Name, strings.Join(d.InspectInterfaces(), ", "), hint)}
}

// checkInspectInterfacePatch answers a patch of inspect_interface before
// it is applied: a string (remove or null resets it to agent); a change
// is 409 outside enroll, inspecting, inspect wait, manageable and
// available unless the node is in maintenance, as for every interface.
func checkInspectInterfacePatch(n *fsm.Node, ops []patchOp) error {
	for i, op := range ops {
		if op.Path != "/inspect_interface" {
			continue
		}
		want := drivers.InspectDefault
		if op.Op != "remove" {
			var v any
			if err := json.Unmarshal(op.Value, &v); err != nil {
				continue // not JSON: applyPatch refuses it
			}
			if v != nil {
				s, ok := v.(string)
				if !ok {
					return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("patch operation %d: /inspect_interface must be a string: agent, or the driver's own (redfish)", i+1)}
				}
				want = s
			}
		}
		if want == drivers.InspectInterfaceOf(n.InspectInterface) || !fsm.UpdateAllowed(n.ProvisionState) {
			continue // no change, or CheckUpdate refuses the whole patch with 409
		}
		switch n.ProvisionState {
		case fsm.Enroll, fsm.Inspecting, fsm.InspectWait, fsm.Manageable, fsm.Available:
		default:
			if !n.Maintenance {
				return &engine.Error{Kind: engine.Conflict, Msg: fmt.Sprintf("Node %s can not have inspect_interface updated unless it is in one of allowed (enroll, inspecting, inspect wait, manageable, available) states or in maintenance mode. Current state is '%s'.", n.Ident(), n.ProvisionState)}
			}
		}
	}
	return nil
}

// checkPatchedInspectInterface refuses a patched node whose
// inspect_interface its (possibly new) driver does not support, and
// stores the default as "".
func (s *Server) checkPatchedInspectInterface(n *fsm.Node) error {
	if n.InspectInterface == "" {
		return nil
	}
	d, err := s.e.Machine().Config().Drivers.Get(n.Driver)
	if err != nil {
		return nil // the engine refuses an unknown driver
	}
	if n.InspectInterface == drivers.InspectDefault {
		n.InspectInterface = ""
		return nil
	}
	return checkInspectInterface(d, n.InspectInterface)
}
