package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bmedge/bmedge/ramdisk/disk"
)

// loopDev is the device every disk measurement runs on.
type loopDev struct {
	path    string // /dev/loopN
	name    string // loopN
	backing string
}

// attachLoop creates the backing file (filled with non-zero data, fsynced
// and dropped from the page cache) and attaches it with direct I/O and
// partition scanning. The returned cleanup detaches it.
func attachLoop(ctx context.Context, backing string, size int64, cleanups *[]func()) (*loopDev, error) {
	if err := fillFile(ctx, backing, size); err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", "--direct-io=on", "--partscan", backing).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("losetup --find --show --direct-io=on --partscan: %v: %s; are loop devices available here?", err, strings.TrimSpace(string(out)))
	}
	l := &loopDev{path: strings.TrimSpace(string(out)), backing: backing}
	l.name = filepath.Base(l.path)
	*cleanups = append(*cleanups, func() { detachLoop(l.path) })
	return l, nil
}

// detachLoop retries for a few seconds: the device is busy while a killed
// child still closes it.
func detachLoop(path string) {
	var out []byte
	var err error
	for range 20 {
		out, err = exec.Command("losetup", "-d", path).CombinedOutput()
		if err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "bench-ramdisk: losetup -d %s failed: %v: %s; detach it by hand\n", path, err, strings.TrimSpace(string(out)))
}

func (l *loopDev) dio() string {
	b, err := os.ReadFile("/sys/block/" + l.name + "/loop/dio")
	if err != nil {
		return "unknown"
	}
	if strings.TrimSpace(string(b)) == "1" {
		return "on"
	}
	return "OFF (the backing filesystem refused O_DIRECT; the page cache is in the way)"
}

// fillFile writes size bytes of pseudo-random data, so that the backing
// file is fully allocated before anything is timed.
func fillFile(ctx context.Context, path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, 4<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(int64(len(buf)), size-off)
		_, _ = rng.Read(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			return fmt.Errorf("fill %s: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	return f.Close()
}

// timeCmd runs a command and returns its wall time.
func timeCmd(ctx context.Context, name string, args ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return d, nil
}

// coldDevice flushes and drops the device's own page cache (BLKFLSBUF),
// as after a fresh boot, so that no measurement inherits the previous
// one's cached or dirty pages. It leaves other devices' caches alone: the
// machine is shared.
func coldDevice(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0); err != nil {
		return fmt.Errorf("BLKFLSBUF %s: %w", path, err)
	}
	return nil
}

func diskBench(ctx context.Context, cfg config, tmp string, cleanups *[]func()) ([]row, error) {
	var rows []row
	fmt.Printf("preparing a %d MiB backing file and a loop device...\n", cfg.size>>20)
	l, err := attachLoop(ctx, filepath.Join(tmp, "backing.img"), cfg.size, cleanups)
	if err != nil {
		return nil, err
	}
	dev, err := disk.FromPath(l.path, "")
	if err != nil {
		return nil, err
	}
	fmt.Printf("device: %s (%d MiB, logical block %d, direct I/O %s, backing file on the same filesystem as the temporary folder)\n\n",
		l.path, dev.SizeBytes>>20, dev.LogicalBlockSize, l.dio())

	if !cfg.onlyImage {
		r, err := overwriteBench(ctx, cfg, l)
		rows = append(rows, r...)
		if err != nil {
			return rows, err
		}
		r, err = metadataBench(ctx, cfg, l)
		rows = append(rows, r...)
		if err != nil {
			return rows, err
		}
	}
	r, err := imageBench(ctx, cfg, tmp, l, cleanups)
	rows = append(rows, r...)
	return rows, err
}

func overwriteBench(ctx context.Context, cfg config, l *loopDev) ([]row, error) {
	count := cfg.size / (4 << 20)
	ddArgs := []string{"if=/dev/zero", "of=" + l.path, "bs=4M", fmt.Sprintf("count=%d", count), "oflag=direct", "conv=fsync", "status=none"}
	fmt.Printf("== erase overwrite (erase_devices: disk.EraseAll with NoOffload, so the overwrite method; then its read-back verification)\n")
	fmt.Printf("baseline: dd %s\n", strings.Join(ddArgs, " "))
	var dds, overs, verifies []time.Duration
	var res disk.EraseResult
	for i := range cfg.reps {
		var dd, over, verify time.Duration
		runDD := func() error {
			if err := coldDevice(l.path); err != nil {
				return err
			}
			d, err := timeCmd(ctx, "dd", ddArgs...)
			dd = d
			return err
		}
		runOurs := func() error {
			if err := coldDevice(l.path); err != nil {
				return err
			}
			dev, err := disk.FromPath(l.path, "")
			if err != nil {
				return err
			}
			var verifyStart time.Time
			// The default opener, with a note of when the verification
			// opens the device read-only: the overwrite ends there.
			open := func(path string, mode disk.OpenMode) (disk.Target, error) {
				if !mode.Write && verifyStart.IsZero() {
					verifyStart = time.Now()
				}
				return disk.OpenFile(path, mode)
			}
			t0 := time.Now()
			rs, err := disk.EraseAll(ctx, []disk.Device{dev}, disk.EraseOptions{NoOffload: true, Open: open})
			end := time.Now()
			if err != nil {
				return err
			}
			res = rs[0]
			if res.Method != disk.MethodOverwrite {
				return fmt.Errorf("erase used %s, not %s (notes %v)", res.Method, disk.MethodOverwrite, res.Notes)
			}
			if verifyStart.IsZero() {
				return errors.New("the erase did not open the device for verification")
			}
			over, verify = verifyStart.Sub(t0), end.Sub(verifyStart)
			return nil
		}
		if err := alternate(i, runDD, runOurs); err != nil {
			return nil, err
		}
		dds, overs, verifies = append(dds, dd), append(overs, over), append(verifies, verify)
		fmt.Printf("  rep %d: dd %s (%.0f MB/s) | project overwrite %s (%.0f MB/s, %.1f%% of dd), verification of %d blocks %s\n",
			i+1, secs(dd), mbps(cfg.size, dd), secs(over), mbps(cfg.size, over), 100*dd.Seconds()/over.Seconds(), res.VerifiedSamples, fmtMs(verify))
	}
	if err := checkZero(l.path, cfg.size); err != nil {
		return nil, err
	}
	dd, over, verify := median(dds), median(overs), median(verifies)
	ratio := dd.Seconds() / over.Seconds()
	fmt.Printf("  median: dd %.0f MB/s, project %.0f MB/s: %.1f%% of dd; verification %s; method %s; device reads back as zeros\n\n",
		mbps(cfg.size, dd), mbps(cfg.size, over), 100*ratio, fmtMs(verify), res.Method)
	return []row{
		{"erase overwrite / dd (" + sizeName(cfg.size) + ")", fmt.Sprintf("%.1f%% (%.0f vs %.0f MB/s)", 100*ratio, mbps(cfg.size, over), mbps(cfg.size, dd)), "≥ 95%", metOrMissed(ratio >= targetOverwriteRatio)},
		{"erase verification (" + fmt.Sprint(res.VerifiedSamples) + " × 4 KiB, O_DIRECT)", fmtMs(verify), "-", "-"},
	}, nil
}

// checkZero reads the device back through the page-cache-free path and
// fails at the first non-zero byte: the erase must really have erased.
func checkZero(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := alignedBuf(4 << 20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		n, err := f.ReadAt(buf, off)
		if n != len(buf) && off+int64(n) != size {
			return fmt.Errorf("read back %s at %d: %v", path, off, err)
		}
		for i, b := range buf[:n] {
			if b != 0 {
				return fmt.Errorf("after the erase %s has a non-zero byte at offset %d", path, off+int64(i))
			}
		}
	}
	return nil
}

func alignedBuf(n int) []byte {
	b := make([]byte, n+4096)
	off := 0
	for (uintptr(unsafe.Pointer(&b[0]))+uintptr(off))%4096 != 0 {
		off++
	}
	return b[off : off+n]
}

func metadataBench(ctx context.Context, cfg config, l *loopDev) ([]row, error) {
	fmt.Printf("== metadata erase (erase_devices_metadata: disk.EraseMetadata)\n")
	have := ensureTool(ctx, cfg, "sgdisk", "gdisk") && ensureTool(ctx, cfg, "mkfs.ext4", "e2fsprogs") &&
		ensureTool(ctx, cfg, "wipefs", "util-linux") && ensureTool(ctx, cfg, "partx", "util-linux")
	if !have {
		fmt.Printf("  skipped: sgdisk, mkfs.ext4, wipefs or partx is missing (run with -install, or install gdisk e2fsprogs util-linux)\n\n")
		return []row{{"metadata erase per disk", "skipped (no sgdisk/mkfs.ext4)", "-", "-"}}, nil
	}
	fmt.Printf("  before each: sgdisk -n 1:2048:0 -t 1:8300 %s; mkfs.ext4 -q -F %sp1 (not timed)\n", l.path, l.path)
	var times []time.Duration
	var last []disk.MetadataResult
	for i := range cfg.reps {
		if _, err := timeCmd(ctx, "sgdisk", "--zap-all", l.path); err != nil {
			return nil, err
		}
		if _, err := timeCmd(ctx, "sgdisk", "-n", "1:2048:0", "-t", "1:8300", l.path); err != nil {
			return nil, err
		}
		part := l.path + "p1"
		if err := waitFor(ctx, part, time.Second); err != nil {
			// Kernels without partition-table parsers (no
			// CONFIG_EFI_PARTITION) ignore the GPT: register the
			// partition from user space (libblkid reads the GPT, BLKPG
			// adds it), which is what the kernel would have done.
			if _, err := timeCmd(ctx, "partx", "--add", l.path); err != nil {
				return nil, fmt.Errorf("the kernel did not create %s and partx could not add it: %w", part, err)
			}
			if i == 0 {
				fmt.Printf("  note: this kernel did not scan the GPT (no partition-table parsers): partx --add registered %s\n", part)
			}
			if err := waitFor(ctx, part, 5*time.Second); err != nil {
				return nil, err
			}
		}
		if _, err := timeCmd(ctx, "mkfs.ext4", "-q", "-F", part); err != nil {
			return nil, err
		}
		before := signatures(ctx, l.path, part)
		dev, err := disk.FromPath(l.path, "")
		if err != nil {
			return nil, err
		}
		if len(dev.Partitions) != 1 {
			return nil, fmt.Errorf("%s should have one partition after sgdisk, sysfs shows %d", l.path, len(dev.Partitions))
		}
		if err := coldDevice(l.path); err != nil {
			return nil, err
		}
		t0 := time.Now()
		res, err := disk.EraseMetadata(ctx, dev, disk.EraseOptions{})
		d := time.Since(t0)
		if err != nil {
			return nil, err
		}
		last = res
		times = append(times, d)
		after := signatures(ctx, l.path)
		gone := "partition node gone"
		if _, err := os.Stat(part); err == nil {
			gone = "partition node still present"
		}
		if after == "" {
			after = "none"
		}
		fmt.Printf("  rep %d: %s; signatures before: %s; after: %s; %s\n", i+1, fmtMs(d), before, after, gone)
		if after != "none" {
			return nil, fmt.Errorf("signatures survived the metadata erase of %s: %s", l.path, after)
		}
	}
	var regions []string
	for _, r := range last {
		regions = append(regions, fmt.Sprintf("%s: %d regions", r.Path, len(r.Regions)))
	}
	m := median(times)
	fmt.Printf("  median %s (%s; re-read partitions: %s)\n\n", fmtMs(m), strings.Join(regions, ", "), last[len(last)-1].Reread)
	return []row{{"metadata erase per disk (GPT + ext4 partition)", fmtMs(m) + " (median of " + fmt.Sprint(len(times)) + ")", "-", "-"}}, nil
}

// signatures lists what wipefs finds on the paths, e.g. "PMBR gpt ext4".
func signatures(ctx context.Context, paths ...string) string {
	var all []string
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		out, err := exec.CommandContext(ctx, "wipefs", "--no-act", "--noheadings", "--output", "TYPE", p).Output()
		if err != nil {
			all = append(all, "(wipefs failed: "+err.Error()+")")
			continue
		}
		all = append(all, strings.Fields(string(out))...)
	}
	return strings.Join(all, " ")
}

func waitFor(ctx context.Context, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s", path, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ensureTool looks for name and, if allowed, installs pkg with apt-get.
func ensureTool(ctx context.Context, cfg config, name, pkg string) bool {
	if _, err := exec.LookPath(name); err == nil {
		return true
	}
	if !cfg.install {
		return false
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return false
	}
	fmt.Printf("  %s is missing: apt-get install %s\n", name, pkg)
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "-qq", "--no-install-recommends", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := install(); err != nil {
		_ = exec.CommandContext(ctx, "apt-get", "update", "-qq").Run()
		if err := install(); err != nil {
			fmt.Printf("  apt-get install %s failed: %v\n", pkg, err)
			return false
		}
	}
	_, err := exec.LookPath(name)
	return err == nil
}

func fmtMs(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	return secs(d)
}

func sizeName(n int64) string {
	if n%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
