package store

// Key prefixes of what the nodes' BMCs reported, one record per node:
// the firmware components (Ironic's firmware API, 1.86) and the BIOS
// settings (Ironic's bios API, 1.40 and 1.74).
const (
	FirmwarePrefix = "fw/"
	BIOSPrefix     = "bios/"
)
