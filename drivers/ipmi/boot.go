package ipmi

import (
	"context"
	"errors"
	"fmt"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/types"

	"github.com/bmedge/bmedge/protocol"
)

// Boot devices beyond the protocol's pxe and disk, with Ironic's names.
const (
	BootCDROM = "cdrom"
	BootBIOS  = "bios" // the firmware's setup screen
	BootSafe  = "safe" // the disk, in the firmware's safe mode
)

// Boot modes.
const (
	BootModeUEFI = "uefi"
	BootModeBIOS = "bios"
)

// bootSelectors map Ironic's boot device names to IPMI's boot device
// selector (Set System Boot Options, parameter 5, data byte 2 bits 5:2).
var bootSelectors = map[string]types.BootDeviceSelector{
	protocol.BootPXE:  types.BootDeviceSelectorForcePXE,
	protocol.BootDisk: types.BootDeviceSelectorForceHardDrive,
	BootSafe:          types.BootDeviceSelectorForceHardDriveSafe,
	BootCDROM:         types.BootDeviceSelectorForceCDROM,
	BootBIOS:          types.BootDeviceSelectorForceBIOSSetup,
}

// Boot is a boot device request.
type Boot struct {
	// Device is pxe, disk, cdrom, bios or safe.
	Device string
	// Persistent asks for every future boot; false is the next boot only.
	Persistent bool
	// Mode is BootModeUEFI or BootModeBIOS; empty takes Options.BootMode.
	Mode string
}

// BootReport is the boot device as the BMC reports it.
type BootReport struct {
	// Device is Ironic's name for the selector, empty for "no override"
	// or a selector Ironic has no name for (see Selector).
	Device   string
	Selector types.BootDeviceSelector
	// Valid, Persistent and UEFI are the flags of the BMC's answer. Some
	// BMCs (ipmi_sim among them) always answer them as false.
	Valid, Persistent, UEFI bool
}

// bootFlags builds boot options parameter 5 for a request: byte 1 holds
// valid (0x80), persistent (0x40) and EFI (0x20), byte 2 the selector
// shifted by 2; Ironic's ipmitool driver sends the same bytes (0xe0 0x04
// for a persistent UEFI PXE boot).
func bootFlags(req Boot) (*types.BootOptionParam_BootFlags, error) {
	sel, ok := bootSelectors[req.Device]
	if !ok {
		return nil, fmt.Errorf("IPMI driver: unknown boot device %q; use pxe, disk, cdrom, bios or safe", req.Device)
	}
	var efi types.BIOSBootType
	switch req.Mode {
	case BootModeUEFI:
		efi = types.BIOSBootTypeEFI
	case BootModeBIOS:
		efi = types.BIOSBootTypeLegacy
	default:
		return nil, fmt.Errorf("IPMI driver: unknown boot mode %q; use %q or %q", req.Mode, BootModeUEFI, BootModeBIOS)
	}
	return &types.BootOptionParam_BootFlags{
		BootFlagsValid:     true,
		Persist:            req.Persistent,
		BIOSBootType:       efi,
		BootDeviceSelector: sel,
	}, nil
}

// SetBootDevice implements drivers.BMC: pxe or disk, persistent, in
// Options.BootMode.
func (b *BMC) SetBootDevice(ctx context.Context, device string) error {
	if device != protocol.BootPXE && device != protocol.BootDisk {
		return fmt.Errorf("IPMI driver: unknown boot device %q; use %q or %q", device, protocol.BootPXE, protocol.BootDisk)
	}
	return b.SetBoot(ctx, Boot{Device: device, Persistent: true})
}

// SetBoot sets the boot device for the next boot or for every boot, with
// the boot mode flag. Like Ironic (ipmi_disable_boot_timeout, true by
// default) it first tells the BMC not to clear the request after its 60 s
// timeout, since a node may take longer than that to reboot.
//
// It sends boot options parameter 5 alone, as go-ipmi's SetBootDevice
// does. SetBootParamBootFlags would wrap it in "set in progress"
// (parameter 0), which some BMCs, ipmi_sim among them, refuse with 0xcc.
func (b *BMC) SetBoot(ctx context.Context, req Boot) error {
	if req.Mode == "" {
		req.Mode = b.opts.BootMode
	}
	flags, err := bootFlags(req)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cfg.noTimeout {
		keep := &types.BootOptionParam_BMCBootFlagValidBitClear{DontClearOnCommandReceivedTimeout: true}
		err := b.do(ctx, "keep the boot device past its 60 s timeout (boot options parameter 3)", b.opts.Retries, func(ctx context.Context, c *client.Client) error {
			return c.SetSystemBootOptionsParamFor(ctx, keep)
		})
		if err != nil && !errors.Is(err, ErrNoAnswer) && !errors.Is(err, ErrRefused) {
			return fmt.Errorf("%w; if this BMC does not implement it, set driver_info ipmi_disable_boot_timeout to false", err)
		}
		if err != nil {
			return err
		}
	}
	what := fmt.Sprintf("set the boot device to %s (%s, %s)", req.Device, onceOrAlways(req.Persistent), req.Mode)
	return b.do(ctx, what, b.opts.Retries, func(ctx context.Context, c *client.Client) error {
		return c.SetSystemBootOptionsParamFor(ctx, flags)
	})
}

func onceOrAlways(persistent bool) string {
	if persistent {
		return "persistent"
	}
	return "next boot only"
}

// BootDevice reads the boot device the BMC reports (boot options
// parameter 5).
func (b *BMC) BootDevice(ctx context.Context) (BootReport, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	flags := &types.BootOptionParam_BootFlags{}
	err := b.do(ctx, "report the boot device", b.opts.Retries, func(ctx context.Context, c *client.Client) error {
		return c.GetSystemBootOptionsParamFor(ctx, flags)
	})
	if err != nil {
		return BootReport{}, err
	}
	r := BootReport{Selector: flags.BootDeviceSelector, Valid: flags.BootFlagsValid, Persistent: flags.Persist, UEFI: bool(flags.BIOSBootType)}
	for name, sel := range bootSelectors {
		if sel == flags.BootDeviceSelector {
			r.Device = name
		}
	}
	return r, nil
}
