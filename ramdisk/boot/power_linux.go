package boot

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// PowerOff syncs the file systems and powers the machine off with
// reboot(2). It returns only on failure.
func PowerOff() error {
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		return fmt.Errorf("reboot(POWER_OFF): %w", err)
	}
	select {} // the kernel is powering off
}

// Reboot syncs the file systems and restarts the machine with reboot(2).
// It returns only on failure.
func Reboot() error {
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); err != nil {
		return fmt.Errorf("reboot(RESTART): %w", err)
	}
	select {}
}
