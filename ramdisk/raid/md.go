package raid

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bmedge/bmedge/ramdisk/disk"
	"github.com/bmedge/bmedge/ramdisk/image"
	"golang.org/x/sys/unix"
)

// Options tune Create and Delete; the zero value is right for the ramdisk.
type Options struct {
	Log *slog.Logger
	// Mdadm is the mdadm binary; default "mdadm" from PATH.
	Mdadm string
	// LoadModules loads the md kernel modules; nil means none is loaded
	// (a kernel with md built in).
	LoadModules func(names ...string) error
	// SysRoot is sysfs ("" means /sys), for listing md devices.
	SysRoot string
	// BootMode is "bios" or "uefi"; "" means the ramdisk's own boot mode
	// (uefi when SysRoot has firmware/efi), IPA's fallback when the node
	// gives none.
	BootMode string
}

// bootMode is the boot mode the software RAID root is built for.
func (o Options) bootMode() string {
	if o.BootMode != "" {
		return o.BootMode
	}
	if st, err := os.Stat(filepath.Join(o.sysRoot(), "firmware", "efi")); err == nil && st.IsDir() {
		return "uefi"
	}
	return "bios"
}

func (o Options) mdadm(ctx context.Context, args ...string) (string, error) {
	bin := o.Mdadm
	if bin == "" {
		bin = "mdadm"
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	err := cmd.Run()
	s := strings.TrimSpace(out.String())
	if o.Log != nil {
		o.Log.Info("mdadm", "args", strings.Join(args, " "), "err", err, "out", s)
	}
	if err != nil {
		return s, fmt.Errorf("mdadm %s: %v: %s", strings.Join(args, " "), err, s)
	}
	return s, nil
}

func (o Options) sysRoot() string {
	if o.SysRoot == "" {
		return "/sys"
	}
	return o.SysRoot
}

// Array is one md array built or deleted, for the step's result.
type Array struct {
	Device     string   `json:"device"`
	VolumeName string   `json:"volume_name"`
	RaidLevel  string   `json:"raid_level"`
	Members    []string `json:"members"`
	SizeBytes  uint64   `json:"size_bytes,omitempty"`
}

// partPath is the device node of partition n of disk path.
func partPath(path string, n int) string {
	if last := path[len(path)-1]; last >= '0' && last <= '9' {
		return fmt.Sprintf("%sp%d", path, n)
	}
	return fmt.Sprintf("%s%d", path, n)
}

// holders picks each logical disk's disks: those its physical_disks
// hints name (a disk once each), else every candidate disk.
func holders(devs []disk.Device, ld LogicalDisk) ([]disk.Device, error) {
	if len(ld.PhysicalDisks) == 0 {
		return devs, nil
	}
	var out []disk.Device
	left := append([]disk.Device(nil), devs...)
	for _, h := range ld.PhysicalDisks {
		b, _ := json.Marshal(h)
		var hints image.RootDeviceHints
		if err := json.Unmarshal(b, &hints); err != nil {
			return nil, fmt.Errorf("physical_disks hint %s: %w", b, err)
		}
		d, err := image.SelectRoot(left, hints)
		if err != nil {
			return nil, fmt.Errorf("physical_disks hint %s: %w", b, err)
		}
		out = append(out, d)
		for i := range left {
			if left[i].Path == d.Path {
				left = append(left[:i], left[i+1:]...)
				break
			}
		}
	}
	return out, nil
}

// Created is what Create built.
type Created struct {
	// RaidConfig is the raid_config to report: cfg with each array's
	// device and members; no root_device_hint (md numbers change when a
	// later boot assembles the arrays, and write_image finds the root
	// array itself).
	RaidConfig map[string]any
	Arrays     []Array
	// BIOSBoot lists the BIOS boot partitions made (one per holder disk,
	// in BIOS boot mode), where write_image's GRUB puts its core image.
	BIOSBoot []string
}

// Create builds cfg's logical disks on devs (the writable, fixed disks):
// on each holder disk a GPT with, in BIOS boot mode, a BIOS boot
// partition (IPA's 2 MiB, type EF02) in the room before the RAID
// partitions, then one RAID partition per logical disk; an md array per
// logical disk. A root volume in UEFI boot mode is refused: its boot
// loader (an EFI system partition on each holder) is not built here.
func Create(ctx context.Context, cfg Config, devs []disk.Device, createRoot, createNonroot bool, o Options) (Created, error) {
	var none Created
	if o.LoadModules != nil {
		if err := o.LoadModules("raid0", "raid1", "raid10"); err != nil {
			return none, fmt.Errorf("load the md kernel modules: %w", err)
		}
	}
	// The root array is the volume marked is_root_volume, else the first
	// (RAID-1) volume: /dev/md0 either way, where write_image writes.
	marked := false
	for _, ld := range cfg.LogicalDisks {
		marked = marked || ld.IsRootVolume
	}
	mode := o.bootMode()
	if mode == "uefi" && ((marked && createRoot) || (!marked && createNonroot)) {
		return none, fmt.Errorf("the ramdisk runs in UEFI boot mode, and a software RAID root volume is built here for BIOS boot only " +
			"(a BIOS boot partition and GRUB for BIOS on each holder disk; UEFI's EFI system partition on each holder is not implemented): " +
			"boot the node in legacy BIOS mode, or set create_root_volume to false to build only the other volumes")
	}
	// The root volume first: it becomes /dev/md0.
	var lds []LogicalDisk
	for _, ld := range cfg.LogicalDisks {
		if ld.IsRootVolume && createRoot {
			lds = append([]LogicalDisk{ld}, lds...)
		} else if !ld.IsRootVolume && createNonroot {
			lds = append(lds, ld)
		}
	}
	if len(lds) == 0 {
		return none, fmt.Errorf("nothing to create: create_root_volume and create_nonroot_volumes leave no logical disk of target_raid_config")
	}
	// Each logical disk's holders; every holder gets one partition per
	// logical disk it holds.
	perLD := make([][]disk.Device, len(lds))
	var all []disk.Device
	seen := map[string]bool{}
	for i, ld := range lds {
		hs, err := holders(devs, ld)
		if err != nil {
			return none, err
		}
		if len(hs) < 2 {
			return none, fmt.Errorf("software RAID needs at least two disks for each logical disk; found %d usable disk(s)", len(hs))
		}
		if ld.RaidLevel == "1+0" && len(hs) < 4 {
			return none, fmt.Errorf("RAID 1+0 needs at least four disks (two mirrored pairs); found %d", len(hs))
		}
		perLD[i] = hs
		for _, h := range hs {
			if !seen[h.Path] {
				seen[h.Path] = true
				all = append(all, h)
			}
		}
	}
	var withParts []string
	for _, d := range all {
		if len(d.Partitions) > 0 {
			withParts = append(withParts, d.Path)
		}
	}
	if len(withParts) > 0 {
		return none, fmt.Errorf("partitions detected on devices %s during RAID config: run raid.delete_configuration or deploy.erase_devices_metadata first", strings.Join(withParts, ", "))
	}
	// Partition every holder: its logical disks in order, then (BIOS
	// boot mode) the BIOS boot partition before them on the disk.
	index := map[string]map[int]int{} // disk -> logical disk -> partition number
	var biosBoot []string
	for hi, d := range all {
		var sizes []uint64
		var names []string
		var which []int
		for i, ld := range lds {
			for _, h := range perLD[i] {
				if h.Path != d.Path {
					continue
				}
				s, err := ld.sizeBytes()
				if err != nil {
					return none, err
				}
				sizes, which = append(sizes, s), append(which, i)
				names = append(names, volumeName(ld, i))
			}
		}
		sector := d.LogicalBlockSize
		if sector == 0 {
			sector = 512
		}
		parts, err := layout(sizes, names, d.SizeBytes, sector)
		if err != nil {
			return none, fmt.Errorf("%s: %w", d.Path, err)
		}
		if mode == "bios" {
			parts = append(parts, biosBootPart(hi))
			biosBoot = append(biosBoot, partPath(d.Path, len(parts)))
		}
		if err := partition(d.Path, d.SizeBytes, sector, parts); err != nil {
			return none, err
		}
		index[d.Path] = map[int]int{}
		for k, i := range which {
			index[d.Path][i] = k + 1
		}
	}
	var arrays []Array
	var reported []any
	for i, ld := range lds {
		md := fmt.Sprintf("/dev/md%d", i)
		var members []string
		for _, h := range perLD[i] {
			p := partPath(h.Path, index[h.Path][i])
			if err := waitNode(ctx, p); err != nil {
				return none, err
			}
			members = append(members, p)
		}
		name := volumeName(ld, i)
		args := []string{"--create", md, "--force", "--run", "--metadata=1.2", "--homehost=any", "--level", Levels[ld.RaidLevel],
			"--name", name, "--raid-devices", fmt.Sprint(len(members))}
		if _, err := o.mdadm(ctx, append(args, members...)...); err != nil {
			return none, fmt.Errorf("create md device %s on %s: %w", md, strings.Join(members, " "), err)
		}
		a := Array{Device: md, VolumeName: name, RaidLevel: ld.RaidLevel, Members: members}
		a.SizeBytes = readSize(filepath.Join(o.sysRoot(), "block", filepath.Base(md), "size"))
		arrays = append(arrays, a)
		b, _ := json.Marshal(ld)
		var r map[string]any
		_ = json.Unmarshal(b, &r)
		r["volume_name"] = name
		r["controller"] = "software"
		r["device"] = md
		r["members"] = members
		reported = append(reported, r)
	}
	return Created{RaidConfig: map[string]any{"logical_disks": reported}, Arrays: arrays, BIOSBoot: biosBoot}, nil
}

func volumeName(ld LogicalDisk, i int) string {
	if ld.VolumeName != "" {
		return ld.VolumeName
	}
	return fmt.Sprintf("md%d", i)
}

func readSize(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var n uint64
	fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &n)
	return n * 512
}

// partition writes the GPT and has the kernel read it again.
func partition(path string, size, sector uint64, parts []part) error {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_EXCL, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	if err := writeGPT(f, size, sector, parts); err != nil {
		return err
	}
	return rereadPartitions(f)
}

func rereadPartitions(f *os.File) error {
	var err error
	for i := 0; i < 20; i++ {
		if err = unix.IoctlSetInt(int(f.Fd()), unix.BLKRRPART, 0); err == nil || err == unix.ENOTTY {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the kernel did not re-read the partition table of %s: %w", f.Name(), err)
}

// waitNode waits for a device node to appear (devtmpfs).
func waitNode(ctx context.Context, path string) error {
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("partition %s did not appear after the partition table was written", path)
}

// DeleteResult is what Delete did.
type DeleteResult struct {
	Stopped []Array  `json:"stopped"`
	Zeroed  []string `json:"superblocks_zeroed"`
	Wiped   []string `json:"partition_tables_zeroed"`
}

// Delete removes every software RAID on devs, as IPA's
// delete_configuration: it assembles what the disks hold, stops every md
// array, zeroes the md superblock of every member (and of any partition
// or disk of devs that still has one) and then the partition tables of
// the disks that held them (wipe, given each disk as listed after the
// arrays stopped); other disks are left alone.
func Delete(ctx context.Context, devs func() ([]disk.Device, error), wipe func(disk.Device) error, o Options) (DeleteResult, error) {
	var res DeleteResult
	if o.LoadModules != nil {
		if err := o.LoadModules("raid0", "raid1", "raid10"); err != nil {
			return res, fmt.Errorf("load the md kernel modules: %w", err)
		}
	}
	_, _ = o.mdadm(ctx, "--assemble", "--scan") // exits non-zero when nothing is found
	for pass := 0; pass < 2; pass++ {
		mds, err := filepath.Glob(filepath.Join(o.sysRoot(), "block", "md*"))
		if err != nil {
			return res, err
		}
		sort.Strings(mds)
		for _, m := range mds {
			name := filepath.Base(m)
			members := mdMembers(m)
			if _, err := o.mdadm(ctx, "--stop", "/dev/"+name); err != nil {
				return res, fmt.Errorf("stop software RAID device /dev/%s: %w", name, err)
			}
			res.Stopped = append(res.Stopped, Array{Device: "/dev/" + name, Members: members})
			for _, p := range members {
				if _, err := o.mdadm(ctx, "--zero-superblock", p); err != nil {
					return res, fmt.Errorf("remove the md superblock of %s: %w", p, err)
				}
				res.Zeroed = append(res.Zeroed, p)
			}
		}
	}
	list, err := devs()
	if err != nil {
		return res, err
	}
	for _, d := range list {
		cands := []string{d.Path}
		for _, p := range d.Partitions {
			cands = append(cands, p.Path)
		}
		for _, c := range cands {
			// --examine also succeeds on a partition table (mdadm's
			// gpt and mbr pseudo-metadata): only the md magic counts.
			if out, err := o.mdadm(ctx, "--examine", c); err != nil || !strings.Contains(out, "a92b4efc") {
				continue
			}
			if _, err := o.mdadm(ctx, "--zero-superblock", c); err != nil {
				return res, fmt.Errorf("remove the md superblock of %s: %w", c, err)
			}
			res.Zeroed = append(res.Zeroed, c)
		}
		// Only the holder disks lose their partition tables (IPA's
		// delete_configuration): a disk no array used keeps its data.
		holder := false
		for _, c := range cands {
			holder = holder || slices.Contains(res.Zeroed, c)
		}
		if holder && len(d.Partitions) > 0 && wipe != nil {
			if err := wipe(d); err != nil {
				return res, fmt.Errorf("zero the partition table of %s: %w", d.Path, err)
			}
			res.Wiped = append(res.Wiped, d.Path)
		}
	}
	return res, nil
}

// mdMembers lists an md device's members from sysfs (its slaves).
func mdMembers(sysDir string) []string {
	ents, err := os.ReadDir(filepath.Join(sysDir, "slaves"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		out = append(out, "/dev/"+e.Name())
	}
	sort.Strings(out)
	return out
}

// Root finds the software RAID root volume Create built on devs: the md
// array whose members are the first partitions of the disks (Create puts
// the root volume first). It assembles the arrays the disks hold first
// (a fresh ramdisk boot has none running). found is false, without
// error, when no first partition holds an md superblock.
func Root(ctx context.Context, devs []disk.Device, o Options) (md string, found bool, err error) {
	var firsts []string
	for _, d := range devs {
		for _, p := range d.Partitions {
			if p.Number == 1 {
				firsts = append(firsts, p.Path)
			}
		}
	}
	member := ""
	for _, p := range firsts {
		if out, err := o.mdadm(ctx, "--examine", p); err == nil && strings.Contains(out, "a92b4efc") {
			member = p
			break
		}
	}
	if member == "" {
		return "", false, nil
	}
	if o.LoadModules != nil {
		if err := o.LoadModules("raid0", "raid1", "raid10"); err != nil {
			return "", false, fmt.Errorf("load the md kernel modules: %w", err)
		}
	}
	_, _ = o.mdadm(ctx, "--assemble", "--scan")
	mds, _ := filepath.Glob(filepath.Join(o.sysRoot(), "block", "md*"))
	sort.Strings(mds)
	for _, m := range mds {
		for _, s := range mdMembers(m) {
			if s == member {
				return "/dev/" + filepath.Base(m), true, nil
			}
		}
	}
	return "", false, fmt.Errorf("%s holds a software RAID member but no array with it could be assembled (mdadm --assemble --scan); run raid.delete_configuration and raid.create_configuration again", member)
}
