package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupEnv names the blkio cgroup a writer child joins before it writes.
const cgroupEnv = "BM_BENCH_BLKIO_CGROUP"

// blkioRoot is where cgroup v1's blkio controller is mounted.
const blkioRoot = "/sys/fs/cgroup/blkio"

// throttled is a blkio cgroup that limits writes to one device.
type throttled struct {
	dir string
	bps int64
}

// newThrottle creates a blkio cgroup that limits writes to dev to bps
// bytes per second (the kernel's block throttling, as a slower disk would
// limit them). Its cleanup removes it.
func newThrottle(dev string, bps int64, cleanups *[]func()) (*throttled, error) {
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(blkioRoot, "blkio.throttle.write_bps_device")); err != nil {
		return nil, fmt.Errorf("no cgroup v1 blkio throttling at %s (%v); run with -device-mbps '' to skip the throttled comparison", blkioRoot, err)
	}
	dir := filepath.Join(blkioRoot, fmt.Sprintf("bm-bench-%d-%d", os.Getpid(), bps))
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return nil, err
	}
	t := &throttled{dir: dir, bps: bps}
	*cleanups = append(*cleanups, t.remove)
	rule := fmt.Sprintf("%d:%d %d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), bps)
	if err := os.WriteFile(filepath.Join(dir, "blkio.throttle.write_bps_device"), []byte(rule), 0o644); err != nil {
		return nil, fmt.Errorf("set %s: %w", rule, err)
	}
	return t, nil
}

// remove deletes the cgroup once its processes are gone.
func (t *throttled) remove() {
	for i := 0; i < 50; i++ {
		if err := unix.Rmdir(t.dir); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "bench-ramdisk: could not remove cgroup %s\n", t.dir)
}

// joinCgroupFromEnv puts this process into the cgroup named by cgroupEnv
// (the writer child calls it before it opens the device).
func joinCgroupFromEnv() error {
	dir := os.Getenv(cgroupEnv)
	if dir == "" {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// throttledBench compares dd and write_image (raw, sha256) on the same
// loop device limited to each rate: how close write_image comes to a
// device of that speed when the device, not the checksum, is the limit.
func throttledBench(ctx context.Context, cfg config, l *loopDev, raw, url, sum string, cleanups *[]func()) ([]row, error) {
	if len(cfg.deviceMBps) == 0 {
		return nil, nil
	}
	size := cfg.imageSize
	var rows []row
	fmt.Printf("== write_image on the same loop device limited by the kernel's block throttling (cgroup v1 blkio.throttle.write_bps_device),\n")
	fmt.Printf("   as a disk of that speed would limit it; dd and the writer child each run inside the cgroup\n")
	for _, rate := range cfg.deviceMBps {
		t, err := newThrottle(l.path, rate*1000*1000, cleanups)
		if err != nil {
			return nil, err
		}
		ddArgs := []string{"if=" + raw, "of=" + l.path, "bs=4M", "oflag=direct", "conv=fsync", "status=none"}
		var dds, ours, others []time.Duration
		for i := range cfg.reps {
			var dd, our time.Duration
			runDD := func() error {
				if err := freshDevice(l.path, cfg.size); err != nil {
					return err
				}
				// The shell joins the cgroup, then becomes dd.
				d, err := timeCmd(ctx, "sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec dd "$@"`, t.dir}, ddArgs...)...)
				dd = d
				return err
			}
			runOurs := func() error {
				if err := freshDevice(l.path, cfg.size); err != nil {
					return err
				}
				r, err := runChildEnv(ctx, []string{cgroupEnv + "=" + t.dir}, "-url", url, "-dev", l.path, "-checksum", sum)
				if err != nil {
					return err
				}
				our = time.Duration(r.Seconds * float64(time.Second))
				return checkImage(l.path, size, sum, r)
			}
			steps := []func() error{runDD, runOurs}
			var other time.Duration
			if cfg.compareWriter != "" {
				steps = append(steps, func() error {
					if err := freshDevice(l.path, cfg.size); err != nil {
						return err
					}
					r, err := runBinary(ctx, cfg.compareWriter, []string{cgroupEnv + "=" + t.dir}, "-url", url, "-dev", l.path, "-checksum", sum)
					if err != nil {
						return fmt.Errorf("-compare-writer: %w", err)
					}
					other = time.Duration(r.Seconds * float64(time.Second))
					return checkImage(l.path, size, sum, r)
				})
			}
			if err := rotate(i, steps...); err != nil {
				return nil, err
			}
			dds, ours = append(dds, dd), append(ours, our)
			note := ""
			if cfg.compareWriter != "" {
				others = append(others, other)
				note = fmt.Sprintf(" | -compare-writer %s (%.0f MB/s, %.1f%% of dd)", secs(other), mbps(size, other), 100*dd.Seconds()/other.Seconds())
			}
			fmt.Printf("  %d MB/s rep %d: dd %s (%.0f MB/s) | project raw+sha256 %s (%.0f MB/s, %.1f%% of dd)%s; device read back matches\n",
				rate, i+1, secs(dd), mbps(size, dd), secs(our), mbps(size, our), 100*dd.Seconds()/our.Seconds(), note)
		}
		dd, our := median(dds), median(ours)
		ratio := dd.Seconds() / our.Seconds()
		fmt.Printf("  %d MB/s median: dd %.0f MB/s, project %.0f MB/s: %.1f%% of dd\n", rate, mbps(size, dd), mbps(size, our), 100*ratio)
		if len(others) > 0 {
			fmt.Printf("  %d MB/s -compare-writer median %.0f MB/s: %.1f%% of dd\n", rate, mbps(size, median(others)), 100*dd.Seconds()/median(others).Seconds())
		}
		rows = append(rows, row{fmt.Sprintf("write_image raw + sha256 / dd, device limited to %d MB/s", rate),
			fmt.Sprintf("%.1f%% (%.0f vs %.0f MB/s)", 100*ratio, mbps(size, our), mbps(size, dd)), "≥ 90%", metOrMissed(ratio >= targetImageRatio)})
	}
	fmt.Println()
	return rows, nil
}

// parseRates reads a comma-separated list of MB/s values ("" for none).
func parseRates(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("-device-mbps: %q is not a positive number of MB/s", f)
		}
		out = append(out, v)
	}
	return out, nil
}
