package agent

import (
	"context"
	"fmt"
)

// NetbootOptions configure network boot (DHCP or proxy-DHCP, TFTP, HTTP)
// of the ramdisk for nodes without virtual media (ipmi). Not built yet.
type NetbootOptions struct{}

// startNetboot starts the network boot services when configured; stop
// ends them.
func (a *Agent) startNetboot(ctx context.Context) (stop func(), err error) {
	return func() {}, nil
}

// netbootNoteArgs takes what a BMC command tells about a node's boot
// (args.boot_macs of a power command that boots it).
func (a *Agent) netbootNoteArgs(node string, args map[string]any) {}

// netbootBootDevice is called when a node without virtual media gets boot
// device pxe (the ramdisk) or disk (its boot ended).
func (a *Agent) netbootBootDevice(node, device string) error {
	return nil
}

// netbootPower is called before a node without virtual media is powered
// to state.
func (a *Agent) netbootPower(node, state string) error {
	_ = fmt.Sprint
	return nil
}
