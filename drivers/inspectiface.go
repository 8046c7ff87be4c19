package drivers

// A node's inspect interface (Ironic's inspect_interface) chooses how
// inspect reads its hardware:
//
//   - "agent" (the default): the ramdisk boots and reads the hardware in
//     band (Ironic's agent inspection), which sees what only the running
//     system sees: disks as the kernel names them, the NICs' carrier,
//     LLDP;
//   - the driver's own name, for a driver whose BMC inspects out of band
//     (Declaration.OOBInspect: redfish): the edge agent reads the
//     system's processors, memory, drives and NICs from the BMC, no
//     ramdisk boot, no power action (Ironic's RedfishInspect).
const (
	InspectAgent   = "agent"
	InspectDefault = InspectAgent
)

// OOBInspectStep is the out-of-band step an inspection by the BMC runs:
// the edge agent calls the BMC's Inspector and returns the inventory,
// the properties and the ports' addresses, as the ramdisk's
// deploy.inspect_hardware does.
const (
	OOBInspectInterface = "inspect"
	OOBInspectStep      = "inspect_hardware"
)

// OOBInspectName is the name of the driver's out-of-band inspect
// interface: the driver's name when its BMC inspects out of band, else "".
func (d Declaration) OOBInspectName() string {
	if d.OOBInspect {
		return d.Name
	}
	return ""
}

// InspectInterfaces lists the inspect_interface values a node of the
// driver may have, the default first.
func (d Declaration) InspectInterfaces() []string {
	out := []string{InspectAgent}
	if o := d.OOBInspectName(); o != "" {
		out = append(out, o)
	}
	return out
}

// InspectInterfaceOf is a node's inspect_interface: its own, or the
// default when it has none.
func InspectInterfaceOf(nodeValue string) string {
	if nodeValue == "" {
		return InspectDefault
	}
	return nodeValue
}
