package disk

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// MetadataRegionBytes is how much is zeroed at each end of a device or
// partition by EraseMetadata. 1 MiB covers: MBR and primary GPT (first 34
// LBAs, 16 KiB of entries with 512- or 4096-byte sectors), the backup GPT
// in the last LBAs, filesystem superblocks near the start (ext4 at 1 KiB,
// XFS at 0, btrfs primary at 64 KiB), LVM PV labels (first 4 sectors), md
// superblocks (1.1/1.2 at the start, 0.90/1.0 within the last 128 KiB) and
// ZFS labels (two 256 KiB labels at each end).
const MetadataRegionBytes = 1 << 20

// Region is a byte range that was zeroed.
type Region struct {
	Offset uint64 `json:"offset"`
	Length uint64 `json:"length"`
}

// MetadataResult says what EraseMetadata did to one device or partition.
type MetadataResult struct {
	Path       string   `json:"path"`
	SizeBytes  uint64   `json:"size_bytes"`
	Regions    []Region `json:"regions,omitempty"`
	Skipped    bool     `json:"skipped,omitempty"`
	SkipReason string   `json:"skip_reason,omitempty"`
	// Reread is the outcome of asking the kernel to re-read the partition
	// table (only on the whole disk): "ok", "not a block device", or
	// "failed: …" (best-effort; the on-disk metadata is gone regardless).
	Reread string `json:"reread_partitions,omitempty"`
}

// EraseMetadata destroys partition tables and signatures on dev: it zeroes
// the first and last MetadataRegionBytes of every partition and then of
// the whole device, fsyncs, and asks the kernel to re-read the partition
// table. Partitions go first because once the disk's table is gone the
// kernel may drop their device nodes, and a filesystem inside a partition
// starts at the partition's offset, which zeroing the disk's ends misses.
// Protected devices (read-only, virtual media, removable, the boot
// parameters medium) are skipped, not errors.
func EraseMetadata(ctx context.Context, dev Device, opts EraseOptions) ([]MetadataResult, error) {
	if reason := skipReason(dev); reason != "" {
		return []MetadataResult{{Path: dev.Path, SizeBytes: dev.SizeBytes, Skipped: true, SkipReason: reason}}, nil
	}
	if err := CheckNotInUse(dev, opts.ProcRoot); err != nil {
		return nil, err
	}
	var results []MetadataResult
	for _, p := range dev.Partitions {
		if p.ReadOnly {
			results = append(results, MetadataResult{Path: p.Path, SizeBytes: p.SizeBytes, Skipped: true, SkipReason: "partition is read-only"})
			continue
		}
		r, err := zeroEnds(ctx, opts.Open, p.Path, p.SizeBytes)
		if err != nil {
			return results, err
		}
		results = append(results, r)
	}
	r, err := zeroEnds(ctx, opts.Open, dev.Path, dev.SizeBytes)
	if err != nil {
		return results, err
	}
	if dev.Regular {
		r.Reread = "not a block device"
	} else if err := RereadPartitions(dev.Path); err != nil {
		r.Reread = "failed: " + err.Error()
	} else {
		r.Reread = "ok"
	}
	return append(results, r), nil
}

// zeroEnds zeroes the head and tail regions of path (the whole of it when
// it is smaller than two regions) and fsyncs.
func zeroEnds(ctx context.Context, open Opener, path string, size uint64) (MetadataResult, error) {
	res := MetadataResult{Path: path, SizeBytes: size}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("metadata erase of %s cancelled before it started: %w", path, err)
	}
	if size == 0 {
		return res, fmt.Errorf("cannot erase metadata of %s: its size is 0; is the medium present?", path)
	}
	var regions []Region
	if size <= 2*MetadataRegionBytes {
		regions = []Region{{0, size}}
	} else {
		// Start the tail on a 4 KiB boundary so that the writes are
		// block-aligned; the tail then spans 1 MiB to 1 MiB+4 KiB.
		tail := (size - MetadataRegionBytes) &^ (directAlign - 1)
		regions = []Region{{0, MetadataRegionBytes}, {tail, size - tail}}
	}
	t, _, err := openTarget(open, path, true, false)
	if err != nil {
		return res, err
	}
	zeros := make([]byte, MetadataRegionBytes+directAlign)
	for _, r := range regions {
		for off := r.Offset; off < r.Offset+r.Length; {
			n := min(uint64(len(zeros)), r.Offset+r.Length-off)
			if err := writeFull(t, zeros[:n], off, path); err != nil {
				t.Close()
				return res, fmt.Errorf("metadata erase: %w", err)
			}
			off += n
		}
		res.Regions = append(res.Regions, r)
	}
	if err := t.Sync(); err != nil {
		t.Close()
		return res, fmt.Errorf("metadata erase of %s: fsync failed: %w; the device may not have stored the zeros, check it and retry", path, err)
	}
	if err := t.Close(); err != nil {
		return res, fmt.Errorf("metadata erase of %s: close failed: %w", path, err)
	}
	return res, nil
}

// writeFull writes p at off and turns a short write into an error: the
// io.WriterAt contract requires one, but a faulty device driver or wrapper
// may not honour it.
func writeFull(t Target, p []byte, off uint64, path string) error {
	n, err := t.WriteAt(p, int64(off))
	if err != nil {
		return fmt.Errorf("write to %s at offset %d failed: %w; the device may be failing", path, off, err)
	}
	if n != len(p) {
		return fmt.Errorf("short write to %s at offset %d: %d of %d bytes written; the device may be failing or smaller than reported", path, off, n, len(p))
	}
	return nil
}

// RereadPartitions asks the kernel to re-read the partition table of the
// whole-disk device at path (BLKRRPART), so that stale partition nodes
// disappear after an erase and new ones appear after an image write. It
// fails with EBUSY while a partition is in use and with ENOTTY on regular
// files; callers treat it as best-effort.
func RereadPartitions(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cannot open %s to re-read its partition table: %w", path, err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKRRPART, 0); err != nil {
		if errors.Is(err, unix.ENOTTY) {
			return fmt.Errorf("re-read partition table of %s: %w", path, ErrNotBlockDevice)
		}
		return fmt.Errorf("re-read partition table of %s: %w", path, err)
	}
	return nil
}

// skipReason says why dev must not be written to at all, or "" (see
// Device.Protected).
func skipReason(dev Device) string {
	switch why := dev.Protected(); why {
	case "":
		return ""
	case "virtual media":
		return "device is virtual media (CD-ROM or BMC virtual media)"
	case "removable":
		return "device is removable (USB stick, card reader or BMC virtual media)"
	default:
		return "device is " + why
	}
}
