package drivers

import "context"

// BMC is the out-of-band side of a node as the edge agent drives it.
// Every method is idempotent: the coordinator may send a command again.
type BMC interface {
	// Validate checks that the BMC answers with the configured credentials.
	Validate(ctx context.Context) error
	// SetPower switches to "power on", "power off" or "rebooted".
	SetPower(ctx context.Context, state string) error
	// PowerState reads the current power state.
	PowerState(ctx context.Context) (string, error)
	// SetBootDevice sets the next boot device ("pxe" or "disk").
	SetBootDevice(ctx context.Context, device string) error
	// RunStep runs an out-of-band step of this driver.
	RunStep(ctx context.Context, iface, step string, args map[string]any) error
}

// SelfBooter is a BMC whose node boots the ramdisk by itself when told
// to boot from the network: a simulated node, or a development VM given
// the ramdisk on its command line. The edge agent serves virtual media or
// network boot only to the BMCs that are not.
type SelfBooter interface {
	BootsRamdiskItself()
}

// MediaDevice is one virtual media device of a BMC as read: its media
// types as the BMC names them (Redfish's CD, DVD, USBStick, Floppy), and
// what it holds.
type MediaDevice struct {
	MediaTypes []string
	Inserted   bool
	Image      string
}

// Virtual media kinds of MediaBMC: the virtual CD (or DVD), and the
// removable disk (USB stick or floppy).
const (
	MediaKindCD  = "cd"
	MediaKindUSB = "usb"
)

// MediaBMC is a BMC with virtual media an operator may use (redfish): a
// device of a kind takes an image by URL, ejects it, and the devices are
// listed.
type MediaBMC interface {
	InsertMedia(ctx context.Context, kind, imageURL string) error
	EjectMedia(ctx context.Context, kind string) error
	ListMedia(ctx context.Context) ([]MediaDevice, error)
}
