package api

import (
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
	if contains(d.InspectInterfaces(), impl) {
		return nil
	}
	hint := "agent boots the ramdisk to read the hardware"
	if o := d.OOBInspectName(); o != "" {
		hint += ", " + o + " reads it from the BMC (out of band, no ramdisk boot)"
	}
	return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf("inspect interface implementation %s is not supported by hardware type %s. It supports %s: %s.",
		implQuote(impl), d.Name, strings.Join(d.InspectInterfaces(), ", "), hint)}
}

// checkInspectInterfacePatch answers a patch of inspect_interface before
// it is applied (checkKeptInterfacePatch): a string, remove or null
// resets it to agent.
func checkInspectInterfacePatch(n *fsm.Node, ops []patchOp) error {
	return checkKeptInterfacePatch(n, ops, "inspect_interface", drivers.InspectDefault,
		drivers.InspectInterfaceOf(n.InspectInterface), "agent, or the driver's own (redfish)")
}

// checkPatchedInspectInterface refuses a patched node whose
// inspect_interface its (possibly new) driver does not support, and
// stores the default as "".
func (s *Server) checkPatchedInspectInterface(n *fsm.Node) error {
	return s.checkKeptInterface(n, &n.InspectInterface, drivers.InspectDefault, checkInspectInterface)
}
