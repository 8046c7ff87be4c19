// Command bmramdisk is the in-band agent of the bare-metal ramdisk. It
// runs as the uinit of a u-root initramfs: it reads its bm.* parameters
// from the kernel command line, loads the drivers for the hardware, waits
// for randomness, brings the network up and reports that it is ready.
// For now it then powers the node off. It is crash-only: on any
// unrecoverable error it logs the error and reboots (with bm.debug it
// returns to u-root's shell instead).
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/bmedge/bmedge/ramdisk/boot"
)

var logger = boot.NewLogger(os.Stdout, "bmramdisk: ")

func main() {
	p, err := boot.ReadCmdline()
	if err != nil {
		fatal(p, err)
	}
	if err := run(context.Background(), p); err != nil {
		fatal(p, err)
	}
	logger.Printf("powering off")
	if err := boot.PowerOff(); err != nil {
		fatal(p, err)
	}
}

func run(ctx context.Context, p boot.Params) error {
	logger.Printf("starting, pid %d, parameters: %s", os.Getpid(), p)

	rep, err := boot.LoadModules(ctx, boot.ModuleOptions{}, logger.Printf)
	if err != nil {
		return fmt.Errorf("load kernel modules: %w", err)
	}
	logger.Printf("modules: %d loaded, %d failed, %d passes", len(rep.Loaded), len(rep.Failed), rep.Passes)

	if _, err := boot.WaitRandom(logger.Printf); err != nil {
		return err
	}

	nctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	ni, err := boot.NetworkUp(nctx, p.Net, boot.NetOptions{}, logger.Printf)
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	logger.Printf("ready node=%s ip=%s iface=%s mac=%s", p.Node, ni.Addr, ni.Iface, ni.MAC)
	return nil
}

// fatal is the crash-only exit: log, then reboot so that the node comes
// back through PXE in a clean state.
func fatal(p boot.Params, err error) {
	logger.Printf("FATAL: %v", err)
	if p.Debug {
		logger.Printf("bm.debug is set: not rebooting; exiting to the shell")
		os.Exit(1)
	}
	logger.Printf("rebooting in 5s")
	time.Sleep(5 * time.Second)
	if err := boot.Reboot(); err != nil {
		logger.Printf("reboot: %v", err)
	}
	os.Exit(1)
}
