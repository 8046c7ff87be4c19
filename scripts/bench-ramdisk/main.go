// Command bench-ramdisk measures the in-band ramdisk's disk work and boot
// time on this machine, in one run:
//
//   - erase overwrite: the erase_devices code path (disk.EraseAll with the
//     kernel offloads disabled, so it overwrites) against dd writing zeros,
//     on the same loop device with direct I/O; verification timed apart;
//   - metadata erase: disk.EraseMetadata (erase_devices_metadata) of the
//     device holding a GPT with one ext4 partition;
//   - write_image: image.Write streaming a random raw image (and the same
//     image zstd-compressed) with sha256 from HTTP on 127.0.0.1, against dd
//     copying the image file; each write runs in a child process whose
//     peak RSS (VmHWM) is reported;
//   - boot → hello and boot → first heartbeat of the real ramdisk
//     (build/ramdisk) under QEMU with the real coordinator and edge agent
//     (qemu-dev driver), from the start of the QEMU process.
//
// It prints a table of metric, value, target and met/missed at the end.
//
//	sudo go run ./scripts/bench-ramdisk [-size 1GiB] [-reps 5] [-boots 3]
//
// It must run as root (loop devices, partition tables). Everything it
// creates (loop device, backing file, image files, QEMU, coordinator) is
// removed on exit, on failure and on Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// Targets from the issue.
const (
	targetOverwriteRatio = 0.95
	targetImageRatio     = 0.90
	targetRSSMiB         = 64
	targetHeartbeat      = 10 * time.Second
)

type config struct {
	size       int64
	imageSize  int64
	reps       int
	boots      int
	ramdiskDir string
	dir        string
	install    bool
	zstd       bool
	skipDisk   bool
	skipBoot   bool
	keepLogs   bool
	dhcp       bool
	// fastTrackReps: how many times inspect → provide → deploy is timed
	// without and with fast track on the boot bench's node (0: not).
	fastTrackReps int
	profileDir    string
	traceDir      string
	// onlyImage skips the erase and metadata measurements.
	onlyImage bool
	// compareWriter is another build of this bench whose writer child
	// runs in every write_image repetition too (A/B under the same load).
	compareWriter string
	// Image writer tuning, for experiments (0: the production default).
	bufferBytes, buffers, writeDepth int
	// deviceMBps lists device speeds (MB/s) at which write_image is also
	// compared with dd, the loop device being throttled to each.
	deviceMBps []int64
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childWriteCmd {
		os.Exit(childWrite(os.Args[2:]))
	}
	var cfg config
	size := flag.String("size", "1GiB", "size of the loop device (its backing file) and of the test image; a multiple of 4 MiB")
	imageSize := flag.String("image-size", "", "size of the test image (default: -size)")
	flag.IntVar(&cfg.reps, "reps", 5, "repetitions of each throughput and metadata measurement (dd and the project alternate); medians are reported")
	flag.IntVar(&cfg.boots, "boots", 3, "QEMU boots to time; the median is reported")
	flag.StringVar(&cfg.ramdiskDir, "ramdisk-dir", "build/ramdisk", "folder with the ramdisk's vmlinuz and initramfs.cpio.zst (make ramdisk)")
	flag.StringVar(&cfg.dir, "dir", "", "where to create the temporary folder for the backing file and images (default: $TMPDIR or /tmp)")
	flag.BoolVar(&cfg.install, "install", true, "install missing optional tools (gdisk for sgdisk) with apt-get; otherwise their part is skipped")
	flag.BoolVar(&cfg.zstd, "zstd", true, "also measure write_image of the zstd-compressed image")
	flag.BoolVar(&cfg.skipDisk, "skip-disk", false, "skip the loop-device measurements (erase, metadata, write_image, RSS)")
	flag.BoolVar(&cfg.skipBoot, "skip-boot", false, "skip the QEMU boot measurement")
	flag.IntVar(&cfg.fastTrackReps, "fast-track-reps", 3, "after the boots, time inspect → provide → deploy on the same VM without and with fast track (driver_info/fast_track) this many times each, in turns of order, counting the ramdisk boots; medians reported (0 skips it; needs the boot measurement)")
	flag.BoolVar(&cfg.dhcp, "dhcp", false, "the guest takes its address by DHCP (QEMU's user network) instead of the static bm.ip=10.0.2.15/24")
	flag.StringVar(&cfg.profileDir, "cpuprofile", "", "write CPU profiles of the image writer children into this folder")
	flag.StringVar(&cfg.traceDir, "trace", "", "write execution traces (runtime/trace) of the image writer children into this folder")
	flag.BoolVar(&cfg.onlyImage, "only-image", false, "of the loop-device measurements, run only write_image (skip erase overwrite and metadata erase)")
	flag.StringVar(&cfg.compareWriter, "compare-writer", "", "experiment: another build of this bench (e.g. of an earlier commit) whose writer also runs in every write_image repetition, in turn with the others, to compare two writers under the same load")
	flag.IntVar(&cfg.bufferBytes, "image-buffer-bytes", 0, "experiment: image.Options.BufferBytes for the writer (0: the production default)")
	flag.IntVar(&cfg.buffers, "image-buffers", 0, "experiment: image.Options.Buffers for the writer (0: the production default)")
	flag.IntVar(&cfg.writeDepth, "image-write-depth", 0, "experiment: image.Options.WriteDepth for the writer (0: the production default)")
	rates := flag.String("device-mbps", "500,1000,1500", "also compare write_image with dd on the loop device throttled to these speeds in MB/s (SATA SSD to NVMe class); '' for none")
	flag.BoolVar(&cfg.keepLogs, "v", false, "print the coordinator's and edge agent's warnings to stderr")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: sudo go run ./scripts/bench-ramdisk [flags]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	var err error
	if cfg.size, err = parseSize(*size); err != nil {
		fail(fmt.Errorf("-size: %w", err))
	}
	cfg.imageSize = cfg.size
	if *imageSize != "" {
		if cfg.imageSize, err = parseSize(*imageSize); err != nil {
			fail(fmt.Errorf("-image-size: %w", err))
		}
	}
	if cfg.size%(4<<20) != 0 || cfg.size == 0 {
		fail(fmt.Errorf("-size %s is not a positive multiple of 4 MiB (dd writes it in 4 MiB blocks)", *size))
	}
	if cfg.imageSize > cfg.size || cfg.imageSize <= 0 {
		fail(fmt.Errorf("-image-size must be positive and at most -size"))
	}
	if cfg.deviceMBps, err = parseRates(*rates); err != nil {
		fail(err)
	}
	if cfg.reps < 1 || cfg.boots < 0 {
		fail(fmt.Errorf("-reps must be at least 1 and -boots at least 0"))
	}
	if os.Geteuid() != 0 {
		fail(errors.New("must run as root (it attaches a loop device and writes partition tables): sudo go run ./scripts/bench-ramdisk"))
	}
	if err := run(cfg); err != nil {
		if errors.Is(err, errInterrupted) {
			fmt.Fprintln(os.Stderr, "bench-ramdisk: interrupted; the loop device, temporary files, QEMU and servers are gone")
			os.Exit(130)
		}
		fail(err)
	}
}

var errInterrupted = errors.New("interrupted")

func fail(err error) {
	fmt.Fprintf(os.Stderr, "bench-ramdisk: error: %v\n", err)
	os.Exit(1)
}

// row is one line of the final table.
type row struct {
	metric, value, target, status string
}

func run(cfg config) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = errInterrupted
		}
	}()
	go func() {
		<-ctx.Done()
		// A second Ctrl-C ends the process at once.
		stop()
		fmt.Fprintln(os.Stderr, "\nbench-ramdisk: interrupted; cleaning up (Ctrl-C again quits at once and may leave the loop device attached)")
	}()

	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()

	need := []string{"losetup", "dd"}
	if !cfg.skipBoot && cfg.boots > 0 {
		need = append(need, "qemu-system-x86_64")
	}
	for _, t := range need {
		if _, err := exec.LookPath(t); err != nil {
			hint := "install util-linux and coreutils"
			if t == "qemu-system-x86_64" {
				hint = "run make ramdisk (it installs qemu-system-x86), or pass -skip-boot"
			}
			return fmt.Errorf("%s is not on PATH: %s", t, hint)
		}
	}
	var kernel, initrd string
	if !cfg.skipBoot && cfg.boots > 0 {
		if kernel, initrd, err = findRamdisk(cfg.ramdiskDir); err != nil {
			return err
		}
	}

	tmp, err := os.MkdirTemp(cfg.dir, "bench-ramdisk-")
	if err != nil {
		return err
	}
	cleanups = append(cleanups, func() {
		if err := os.RemoveAll(tmp); err != nil {
			fmt.Fprintf(os.Stderr, "bench-ramdisk: cannot remove %s: %v\n", tmp, err)
		}
	})

	start := time.Now()
	printMachine(tmp)
	fmt.Printf("command: %s\n\n", commandLine())

	var rows []row
	if !cfg.skipDisk {
		var need int64 = cfg.size + cfg.imageSize
		if cfg.zstd {
			need += cfg.imageSize + cfg.imageSize/64
		}
		if err := checkFree(tmp, need+256<<20); err != nil {
			return err
		}
		r, err := diskBench(ctx, cfg, tmp, &cleanups)
		rows = append(rows, r...)
		if err != nil {
			printTable(rows)
			return err
		}
	}
	if !cfg.skipBoot && cfg.boots > 0 {
		r, err := bootBench(ctx, cfg, tmp, kernel, initrd, &cleanups)
		rows = append(rows, r...)
		if err != nil {
			printTable(rows)
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fmt.Printf("\nresults (%s, total run time %s):\n", time.Now().Format("2006-01-02 15:04 MST"), time.Since(start).Round(time.Second))
	printTable(rows)
	return nil
}

func printTable(rows []row) {
	if len(rows) == 0 {
		return
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "metric\tvalue\ttarget\tresult")
	fmt.Fprintln(w, "------\t-----\t------\t------")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.metric, r.value, r.target, r.status)
	}
	w.Flush()
}

func metOrMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func commandLine() string {
	args := []string{"go run ./scripts/bench-ramdisk"}
	flag.Visit(func(f *flag.Flag) { args = append(args, "-"+f.Name+"="+f.Value.String()) })
	return strings.Join(args, " ")
}

// printMachine says what the numbers were measured on.
func printMachine(tmp string) {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	var un unix.Utsname
	_ = unix.Uname(&un)
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("machine: %d CPUs (%s), kernel %s, load average %s\n", numCPU(), model, unix.ByteSliceToString(un.Release[:]), strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Printf("temporary files on: %s\n", fsDescription(tmp))
}

func numCPU() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0
	}
	return set.Count()
}

// fsDescription names the filesystem and device holding path, from
// /proc/self/mountinfo (the longest mount point that prefixes it).
func fsDescription(path string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "unknown filesystem"
	}
	best, desc := "", "unknown filesystem"
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 10 {
			continue
		}
		mp := f[4]
		sep := 6
		for sep < len(f) && f[sep] != "-" {
			sep++
		}
		if sep+2 >= len(f) {
			continue
		}
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, desc = mp, fmt.Sprintf("%s (%s on %s)", mp, f[sep+1], f[sep+2])
		}
	}
	return desc
}

func checkFree(dir string, need int64) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	if free := int64(st.Bavail) * st.Bsize; free < need {
		return fmt.Errorf("%s has %d MiB free, the benchmark needs about %d MiB; use a smaller -size or another -dir", dir, free>>20, need>>20)
	}
	return nil
}

func findRamdisk(dir string) (kernel, initrd string, err error) {
	// vmlinux (the kernel uncompressed) as the qemu-dev driver boots
	// fastest; a tree built before it had only vmlinuz.
	kernel = filepath.Join(dir, "vmlinux")
	if _, err := os.Stat(kernel); err != nil {
		kernel = filepath.Join(dir, "vmlinuz")
	}
	if _, err := os.Stat(kernel); err != nil {
		return "", "", fmt.Errorf("no ramdisk kernel at %s: run make ramdisk first (or pass -ramdisk-dir, or -skip-boot)", kernel)
	}
	for _, n := range []string{"initramfs.cpio.zst", "initramfs.cpio.xz", "initramfs.cpio.gz"} {
		p := filepath.Join(dir, n)
		if _, err := os.Stat(p); err == nil {
			return kernel, p, nil
		}
	}
	return "", "", fmt.Errorf("no initramfs.cpio.zst in %s: run make ramdisk first (or pass -ramdisk-dir, or -skip-boot)", dir)
}

// parseSize reads 1GiB, 512MiB, 4M, 1G, or a byte count.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.m
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size such as 1GiB or 512MiB", s)
	}
	return n * mult, nil
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / d.Seconds() / 1e6
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func durations(d []time.Duration) string {
	var s []string
	for _, x := range d {
		s = append(s, fmt.Sprintf("%.2f", x.Seconds()))
	}
	return strings.Join(s, ", ") + " s"
}

// alternate runs a then b, or b then a in odd repetitions, to spread
// drift in the machine's load over both.
func alternate(rep int, a, b func() error) error {
	if rep%2 == 1 {
		a, b = b, a
	}
	if err := a(); err != nil {
		return err
	}
	return b()
}

// freshDevice marks the device's ends (so that a write that did not
// happen cannot pass the read-back) and drops its page cache.
func freshDevice(path string, size int64) error {
	if err := markDevice(path, size); err != nil {
		return err
	}
	return coldDevice(path)
}
