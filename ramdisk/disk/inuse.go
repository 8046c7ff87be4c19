package disk

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// CheckNotInUse returns an error when dev, one of its partitions, or a
// device stacked on them (LVM, md, dm-crypt found through sysfs "holders")
// is mounted or used as swap according to procRoot ("" means /proc).
// Erasing such a device would destroy a live filesystem, possibly the one
// the caller runs from, so every write path in this package calls it first.
// Regular files are never "in use" in this sense.
func CheckNotInUse(dev Device, procRoot string) error {
	if dev.Regular {
		return nil
	}
	if procRoot == "" {
		procRoot = "/proc"
	}
	devNos := map[string]string{} // major:minor -> name, for messages
	paths := map[string]bool{dev.Path: true}
	if dev.DevNo != "" {
		devNos[dev.DevNo] = dev.Name
	}
	for _, p := range dev.Partitions {
		if p.DevNo != "" {
			devNos[p.DevNo] = p.Name
		}
		paths[p.Path] = true
	}
	if dev.SysPath != "" {
		// The sysfs root is two levels above /sys/block/X or further
		// above /sys/devices/...; holders are looked up by name under
		// the "block" class directory next to it.
		blockDir := filepath.Join(sysRootOf(dev.SysPath), "block")
		dirs := []string{dev.SysPath}
		for _, p := range dev.Partitions {
			dirs = append(dirs, filepath.Join(dev.SysPath, p.Name))
		}
		addHolders(blockDir, dirs, devNos, 0)
	}

	mountinfo := filepath.Join(procRoot, "self", "mountinfo")
	f, err := os.Open(mountinfo)
	if err != nil {
		return fmt.Errorf("cannot check whether %s is mounted: %w; mount /proc before erasing", dev.Path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// mountinfo: id parent major:minor root mountpoint ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if name, ok := devNos[fields[2]]; ok {
			return fmt.Errorf("refusing to write to %s: %s (%s) is mounted at %s; unmount it first, or choose another device", dev.Path, name, fields[2], fields[4])
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("cannot check whether %s is mounted: reading %s: %w", dev.Path, mountinfo, err)
	}

	// /proc/swaps names devices by path; a missing file means no swap.
	if b, err := os.ReadFile(filepath.Join(procRoot, "swaps")); err == nil {
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) > 0 && paths[fields[0]] {
				return fmt.Errorf("refusing to write to %s: %s is active swap; run swapoff first", dev.Path, fields[0])
			}
		}
	}
	return nil
}

// addHolders walks the sysfs "holders" links of dirs (recursively, to a
// small depth: dm on md on disk is already three levels) and records the
// holders' device numbers.
func addHolders(blockDir string, dirs []string, devNos map[string]string, depth int) {
	if depth > 4 {
		return
	}
	for _, dir := range dirs {
		entries, err := os.ReadDir(filepath.Join(dir, "holders"))
		if err != nil {
			continue
		}
		var next []string
		for _, e := range entries {
			hdir := filepath.Join(blockDir, e.Name())
			if no := readAttr(filepath.Join(hdir, "dev")); no != "" {
				devNos[no] = e.Name()
			}
			next = append(next, hdir)
		}
		addHolders(blockDir, next, devNos, depth+1)
	}
}

// sysRootOf finds the sysfs mount point from a device directory, which is
// either ROOT/block/X or ROOT/devices/.../block/X (or a partition below).
func sysRootOf(sysPath string) string {
	if i := strings.Index(sysPath, "/devices/"); i >= 0 {
		return sysPath[:i]
	}
	if i := strings.LastIndex(sysPath, "/block/"); i >= 0 {
		return sysPath[:i]
	}
	return "/sys"
}
