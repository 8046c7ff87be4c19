package boot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/u-root/u-root/pkg/kmodule"
	"golang.org/x/sys/unix"
)

// EFIVarsDir is where the kernel's efivarfs is mounted.
const EFIVarsDir = "/sys/firmware/efi/efivars"

// MountEFIVars mounts efivarfs read-only on EFIVarsDir when the node booted
// by UEFI and it is not mounted yet (the ramdisk never writes a UEFI
// variable), loading its module first. It returns false on a BIOS boot.
func MountEFIVars() (bool, error) {
	if _, err := os.Stat("/sys/firmware/efi"); err != nil {
		return false, nil // BIOS: no UEFI variables
	}
	if mounted(EFIVarsDir) {
		return true, nil
	}
	// A failed load is not reported here: efivarfs may be built in, and
	// when it is missing the mount says so.
	if p, err := kmodule.NewProber(kmodule.ProbeOpts{}); err == nil {
		_ = p.Probe("efivarfs", "")
	}
	if err := unix.Mount("efivarfs", EFIVarsDir, "efivarfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return true, fmt.Errorf("mount efivarfs on %s: the kernel has no efivarfs (module efivarfs in ramdisk/build/modules.txt)", EFIVarsDir)
		}
		return true, fmt.Errorf("mount efivarfs on %s: %w", EFIVarsDir, err)
	}
	return true, nil
}

// mounted reports whether dir is a mount point in /proc/self/mounts.
func mounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && filepath.Clean(f[1]) == dir {
			return true
		}
	}
	return false
}
