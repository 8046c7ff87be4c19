package store

// Key prefixes of what the nodes' BMCs reported, one record per node:
// the firmware components (Ironic's firmware API, 1.86) and the BIOS
// settings (Ironic's bios API, 1.40 and 1.74).
const (
	FirmwarePrefix = "fw/"
	BIOSPrefix     = "bios/"
)

// Key prefixes of the hardware's health as the edge agent read it from
// the node's BMC: the latest sensor readings and the event-log entries
// kept (coordinator/engine/readings, health.go), one record per node.
const (
	SensorsPrefix = "hsensors/"
	EventsPrefix  = "hevents/"
)
