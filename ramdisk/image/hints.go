package image

import (
	"github.com/bmedge/bmedge/lib/roothints"
	"github.com/bmedge/bmedge/ramdisk/disk"
)

// MinRootBytes is the smallest disk chosen as root when there are no
// hints (lib/roothints).
const MinRootBytes = roothints.MinRootBytes

// RootDeviceHints are Ironic's root_device hints (node properties), with
// the rules of lib/roothints, which the edge agent's out-of-band
// inspection applies too.
type RootDeviceHints = roothints.Hints

// words name the ramdisk's block devices in SelectRoot's errors.
var words = roothints.Words{
	Floor:   "no writable, fixed, non-virtual disk",
	NoMatch: "no device matches root device hints",
	Seen:    "devices seen",
	None:    "no block devices were found; check that the disk driver is loaded",
}

// SelectRoot chooses the device to write the image to. With no hints it is
// the smallest disk of at least MinRootBytes; with hints it is the first
// device, in the order given (disk.List sorts by name), that matches them
// all, as Ironic's agent does. Protected devices (disk.Device.Protected:
// read-only, virtual media, removable, the boot parameters medium) are
// never chosen. The error lists every device and why it was passed over.
func SelectRoot(devs []disk.Device, hints RootDeviceHints) (disk.Device, error) {
	ds := make([]roothints.Disk, len(devs))
	for i, d := range devs {
		ds[i] = rootDisk(d)
	}
	i, err := roothints.Select(ds, hints, words)
	if err != nil {
		return disk.Device{}, err
	}
	return devs[i], nil
}

// rootDisk is what the root device rule reads of d.
func rootDisk(d disk.Device) roothints.Disk {
	return roothints.Disk{Name: d.Name, SizeBytes: d.SizeBytes, Rotational: d.Rotational, Serial: d.Serial,
		WWN: d.WWN, Model: d.Model, Vendor: d.Vendor, Protected: d.Protected()}
}
