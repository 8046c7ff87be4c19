// Package bmcaddr reads the address of the machine's BMC in band, as
// Ironic Python Agent does with `ipmitool lan print`: through the
// kernel's IPMI driver (/dev/ipmi0, modules ipmi_si and ipmi_devintf),
// the LAN configuration parameter "IP address" of the BMC's LAN
// channels. It only reads; it never changes the BMC.
package bmcaddr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/bougou/go-ipmi/pkg/open"
	"github.com/u-root/u-root/pkg/kmodule"
)

// Device is the IPMI device the kernel's driver makes.
const Device = "/dev/ipmi0"

// Channels are the LAN channels asked, in order (IPA asks 1 to 11; most
// BMCs have their LAN on 1, some on 2, 3 or 8).
var Channels = []uint8{1, 2, 3, 8}

// ErrNoBMC: the machine has no BMC the kernel's IPMI driver reaches.
var ErrNoBMC = errors.New("no IPMI device (no BMC, or one the kernel's ipmi_si driver does not reach)")

// LoadModules loads the kernel's IPMI driver: ipmi_si loads by the ACPI
// or SMBIOS device of a BMC (the ramdisk's modalias pass), ipmi_devintf,
// which makes the device, has no alias. The ramdisk calls it at start; a
// failed load is no error (no BMC, or the driver built in).
func LoadModules() {
	if p, err := kmodule.NewProber(kmodule.ProbeOpts{}); err == nil {
		_ = p.Probe("ipmi_si", "")
		_ = p.Probe("ipmi_devintf", "")
	}
}

// Read returns the BMC's IPv4 address ("" when no channel has one),
// each channel asked within timeout.
func Read(ctx context.Context, timeout time.Duration) (string, error) {
	if _, err := os.Stat(Device); err != nil {
		return "", ErrNoBMC
	}
	var b open.DeviceBackend
	if err := b.Connect(ctx, 0); err != nil {
		return "", fmt.Errorf("open %s: %w", Device, err)
	}
	defer b.Close(ctx)
	var last error
	for _, ch := range Channels {
		// Get LAN Configuration Parameters (NetFn transport 0x0c, command
		// 0x02): channel, parameter 3 (IP address), set 0, block 0.
		resp, err := b.Send(ctx, &open.Request{NetFn: 0x0c, Cmd: 0x02, Data: []byte{ch, 3, 0, 0}}, timeout)
		if err != nil {
			last = err
			continue
		}
		if ip, ok := parseIP(resp); ok {
			return ip, nil
		}
	}
	if last != nil {
		return "", fmt.Errorf("the BMC did not give its LAN address: %w", last)
	}
	return "", nil
}

// parseIP reads a Get LAN Configuration Parameters answer: completion
// code, parameter revision, the four bytes of the address; 0.0.0.0 is
// none.
func parseIP(resp []byte) (string, bool) {
	if len(resp) < 6 || resp[0] != 0 {
		return "", false
	}
	ip := net.IPv4(resp[2], resp[3], resp[4], resp[5])
	if ip.IsUnspecified() {
		return "", false
	}
	return ip.String(), true
}
