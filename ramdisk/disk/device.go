// Package disk lists the node's block devices from sysfs and erases them
// (partition-table metadata or the whole device, verified by reading back);
// it must never write to a device that holds a mounted filesystem or active
// swap, and never report an erase method it did not actually run.
package disk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Device describes one whole block device (or, for tests and images, a
// regular file standing in for one).
type Device struct {
	// Name is the kernel name, e.g. "sda", "nvme0n1", "vda".
	Name string `json:"name"`
	// Path is the device node, e.g. "/dev/sda".
	Path string `json:"path"`
	// SysPath is the device's sysfs directory; empty for regular files.
	SysPath string `json:"sys_path,omitempty"`
	// DevNo is "major:minor"; empty for regular files.
	DevNo string `json:"dev_no,omitempty"`
	// SizeBytes is the capacity in bytes.
	SizeBytes uint64 `json:"size_bytes"`
	// LogicalBlockSize is the smallest addressable unit (512 or 4096).
	LogicalBlockSize uint64 `json:"logical_block_size"`
	Rotational       bool   `json:"rotational"`
	ReadOnly         bool   `json:"read_only"`
	Removable        bool   `json:"removable"`
	// VirtualMedia is true for CD-ROMs (sr*, SCSI type 5), BMC virtual
	// media and the boot parameters medium; such devices are never erased
	// and never chosen as root disk (see Protected).
	VirtualMedia bool `json:"virtual_media"`
	// ParamsMedium is true for the device this boot read its parameters
	// from (MarkParamsMedium); it is VirtualMedia too.
	ParamsMedium bool `json:"params_medium,omitempty"`
	// Loop is true for loop devices, which List only returns when asked.
	Loop bool `json:"loop,omitempty"`
	// Regular is true when Path is a plain file rather than a block device.
	Regular bool   `json:"regular_file,omitempty"`
	Serial  string `json:"serial,omitempty"`
	Model   string `json:"model,omitempty"`
	Vendor  string `json:"vendor,omitempty"`
	// WWN is in udev's ID_WWN form ("0x" + 16 hex digits) for NAA
	// identifiers, else the raw wwid (e.g. "eui.…" for NVMe).
	WWN        string      `json:"wwn,omitempty"`
	Queue      Queue       `json:"queue"`
	Partitions []Partition `json:"partitions,omitempty"`
}

// Queue holds the request-queue limits that decide which erase methods the
// kernel can offload to the device.
type Queue struct {
	DiscardMaxBytes     uint64 `json:"discard_max_bytes"`
	WriteZeroesMaxBytes uint64 `json:"write_zeroes_max_bytes"`
	// DiscardZeroesData is the legacy flag; kernels since 4.12 always
	// report 0, so WriteZeroesMaxBytes is the signal that matters today.
	DiscardZeroesData bool `json:"discard_zeroes_data"`
}

// Partition is one partition of a Device, from /sys/block/X/XN.
type Partition struct {
	Name       string `json:"name"`
	Path       string `json:"path"`
	DevNo      string `json:"dev_no,omitempty"`
	Number     int    `json:"number"`
	StartBytes uint64 `json:"start_bytes"`
	SizeBytes  uint64 `json:"size_bytes"`
	ReadOnly   bool   `json:"read_only"`
}

// Protected says why nothing may ever be written to d (no erase, no
// image), or "" when it may: the boot parameters medium, read-only
// devices, virtual media (CD-ROMs, a BMC's virtual CD or USB stick) and
// removable devices (USB sticks, card readers: a BMC presents its virtual
// media as removable USB devices, and a node's disks are not removable).
func (d Device) Protected() string {
	switch {
	case d.ParamsMedium:
		return "the boot parameters medium"
	case d.ReadOnly:
		return "read-only"
	case d.VirtualMedia:
		return "virtual media"
	case d.Removable:
		return "removable"
	}
	return ""
}

var paramsMedia sync.Map // "major:minor" -> true

// MarkParamsMedium records that the block device devNo ("major:minor")
// holds this boot's parameters (ramdisk/boot.FindParamsMedium): from then
// on List and FromPath report it with ParamsMedium and VirtualMedia set,
// so that it is never erased nor chosen as root device, whatever its
// removable and read-only flags say.
func MarkParamsMedium(devNo string) {
	if devNo != "" {
		paramsMedia.Store(devNo, true)
	}
}

// ListOptions parameterises List. The zero value reads the real /sys and
// names devices under /dev.
type ListOptions struct {
	// SysRoot is the sysfs mount point; tests point it at a fake tree.
	SysRoot string
	// DevRoot is where device nodes live.
	DevRoot string
	// IncludeLoop also returns loop devices that have a backing file.
	IncludeLoop bool
}

func (o ListOptions) sysRoot() string {
	if o.SysRoot == "" {
		return "/sys"
	}
	return o.SysRoot
}

func (o ListOptions) devRoot() string {
	if o.DevRoot == "" {
		return "/dev"
	}
	return o.DevRoot
}

// IgnoredName reports whether a kernel block device name is never a
// physical disk worth listing: RAM disks, zram, device-mapper and md
// devices. Stacked devices (dm, md) are skipped because they sit on top of
// disks that are listed and erased themselves; erasing both would be
// redundant and writing through dm could race the member erase.
func IgnoredName(name string) bool {
	for _, p := range []string{"ram", "zram", "dm-", "md", "nbd", "fd"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// List returns the whole-disk block devices under SysRoot/block, sorted by
// name, with their partitions. Loop devices are left out unless
// IncludeLoop is set; CD-ROMs are included but flagged VirtualMedia.
func List(opts ListOptions) ([]Device, error) {
	blockDir := filepath.Join(opts.sysRoot(), "block")
	entries, err := os.ReadDir(blockDir)
	if err != nil {
		return nil, fmt.Errorf("cannot list block devices: %w; is sysfs mounted at %s?", err, opts.sysRoot())
	}
	var devs []Device
	for _, e := range entries {
		name := e.Name()
		if IgnoredName(name) {
			continue
		}
		if strings.HasPrefix(name, "loop") && !opts.IncludeLoop {
			continue
		}
		d, err := readDevice(filepath.Join(blockDir, name), name, filepath.Join(opts.devRoot(), name))
		if err != nil {
			return nil, err
		}
		// An unattached loop device has size 0 and nothing to erase.
		if d.Loop && d.SizeBytes == 0 {
			continue
		}
		devs = append(devs, d)
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Name < devs[j].Name })
	return devs, nil
}

// FromPath describes the device or regular file at path. For a block device
// the attributes come from sysfs under sysRoot ("" means /sys), found
// through /sys/dev/block/MAJ:MIN, so it also works for loop devices and
// partitions. For a regular file only the size is known, which is enough
// for erasing and image writing in tests.
func FromPath(path, sysRoot string) (Device, error) {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Device{}, fmt.Errorf("cannot use %s as a disk: %w; check the device path", path, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return Device{
			Name:             filepath.Base(path),
			Path:             path,
			SizeBytes:        uint64(st.Size),
			LogicalBlockSize: 512,
			Regular:          true,
		}, nil
	case unix.S_IFBLK:
		devNo := fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
		link := filepath.Join(sysRoot, "dev", "block", devNo)
		sysDir, err := filepath.EvalSymlinks(link)
		if err != nil {
			return Device{}, fmt.Errorf("cannot find sysfs entry for %s (%s): %w; is sysfs mounted at %s?", path, devNo, err, sysRoot)
		}
		return readDevice(sysDir, filepath.Base(sysDir), path)
	default:
		return Device{}, fmt.Errorf("%s is neither a block device nor a regular file; give a disk such as /dev/sda", path)
	}
}

// readDevice fills a Device from its sysfs directory. Only the size is
// mandatory: the other attributes vary by driver and are best-effort.
func readDevice(sysDir, name, path string) (Device, error) {
	sectors, err := readUint(filepath.Join(sysDir, "size"))
	if err != nil {
		return Device{}, fmt.Errorf("cannot read size of block device %s: %w", name, err)
	}
	d := Device{
		Name:    name,
		Path:    path,
		SysPath: sysDir,
		DevNo:   readAttr(filepath.Join(sysDir, "dev")),
		// sysfs "size" is always in 512-byte units, whatever the
		// device's logical block size.
		SizeBytes:  sectors * 512,
		Rotational: readAttr(filepath.Join(sysDir, "queue", "rotational")) == "1",
		ReadOnly:   readAttr(filepath.Join(sysDir, "ro")) == "1",
		Removable:  readAttr(filepath.Join(sysDir, "removable")) == "1",
		Loop:       strings.HasPrefix(name, "loop"),
		Model:      readAttr(filepath.Join(sysDir, "device", "model")),
		Vendor:     readAttr(filepath.Join(sysDir, "device", "vendor")),
		Serial:     readSerial(sysDir),
		WWN:        readWWN(sysDir),
	}
	d.LogicalBlockSize, _ = readUint(filepath.Join(sysDir, "queue", "logical_block_size"))
	if d.LogicalBlockSize == 0 {
		d.LogicalBlockSize = 512
	}
	d.Queue.DiscardMaxBytes, _ = readUint(filepath.Join(sysDir, "queue", "discard_max_bytes"))
	d.Queue.WriteZeroesMaxBytes, _ = readUint(filepath.Join(sysDir, "queue", "write_zeroes_max_bytes"))
	d.Queue.DiscardZeroesData = readAttr(filepath.Join(sysDir, "queue", "discard_zeroes_data")) == "1"
	scsiType := readAttr(filepath.Join(sysDir, "device", "type"))
	d.VirtualMedia = strings.HasPrefix(name, "sr") || scsiType == "5" ||
		(d.Removable && strings.Contains(strings.ToLower(d.Model), "virtual"))
	if _, ok := paramsMedia.Load(d.DevNo); ok && d.DevNo != "" {
		d.ParamsMedium, d.VirtualMedia = true, true
	}
	parts, err := readPartitions(sysDir, name, filepath.Dir(path))
	if err != nil {
		return Device{}, err
	}
	d.Partitions = parts
	return d, nil
}

// readPartitions returns the XN entries of a disk directory: those that
// contain a "partition" file.
func readPartitions(sysDir, disk, devRoot string) ([]Partition, error) {
	entries, err := os.ReadDir(sysDir)
	if err != nil {
		return nil, fmt.Errorf("cannot read partitions of %s: %w", disk, err)
	}
	var parts []Partition
	for _, e := range entries {
		dir := filepath.Join(sysDir, e.Name())
		num, err := readUint(filepath.Join(dir, "partition"))
		if err != nil {
			continue // not a partition (queue, device, holders, ...)
		}
		start, _ := readUint(filepath.Join(dir, "start"))
		size, _ := readUint(filepath.Join(dir, "size"))
		parts = append(parts, Partition{
			Name:       e.Name(),
			Path:       filepath.Join(devRoot, e.Name()),
			DevNo:      readAttr(filepath.Join(dir, "dev")),
			Number:     int(num),
			StartBytes: start * 512,
			SizeBytes:  size * 512,
			ReadOnly:   readAttr(filepath.Join(dir, "ro")) == "1",
		})
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].Number < parts[j].Number })
	return parts, nil
}

// readSerial tries the places drivers publish a serial: NVMe and some SCSI
// drivers in device/serial, virtio-blk in serial, SCSI in VPD page 0x80.
func readSerial(sysDir string) string {
	for _, p := range []string{"device/serial", "serial"} {
		if s := readAttr(filepath.Join(sysDir, p)); s != "" {
			return s
		}
	}
	vpd, err := os.ReadFile(filepath.Join(sysDir, "device", "vpd_pg80"))
	if err == nil && len(vpd) > 4 {
		n := int(vpd[3])
		if 4+n <= len(vpd) {
			return strings.TrimSpace(string(vpd[4 : 4+n]))
		}
	}
	return ""
}

// readWWN returns the world-wide name. NAA ids are converted to udev's
// ID_WWN form (0x + first 16 hex digits) because that is what Ironic's
// inventory and root-device hints use.
func readWWN(sysDir string) string {
	for _, p := range []string{"device/wwid", "wwid"} {
		w := readAttr(filepath.Join(sysDir, p))
		if w == "" {
			continue
		}
		if hex, ok := strings.CutPrefix(w, "naa."); ok {
			if len(hex) > 16 {
				hex = hex[:16]
			}
			return "0x" + strings.ToLower(hex)
		}
		return w
	}
	return ""
}

func readAttr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s does not hold a number: %w", path, err)
	}
	return v, nil
}

// ErrNotBlockDevice is wrapped by operations that only make sense on block
// devices (such as RereadPartitions) when given a regular file.
var ErrNotBlockDevice = errors.New("not a block device")
