package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/bmedge/bmedge/ramdisk/disk"
	"github.com/bmedge/bmedge/ramdisk/image"
)

// childWriteCmd is the hidden subcommand that runs one image.Write in a
// process of its own, so that its peak RSS is the writer's alone.
const childWriteCmd = "__write-image"

// childResult is what the child prints on stdout.
type childResult struct {
	Seconds     float64 `json:"seconds"`
	Written     uint64  `json:"written"`
	Downloaded  uint64  `json:"downloaded"`
	Compression string  `json:"compression"`
	Checksum    string  `json:"checksum"`
	// VmHWMKiB is the child's peak RSS from /proc/self/status after the
	// write; IdleHWMKiB the same read before it started.
	VmHWMKiB   int64 `json:"vmhwm_kib"`
	IdleHWMKiB int64 `json:"idle_vmhwm_kib"`
	// CPUSeconds is the child's user+system CPU time; MachineBusy the
	// share of all CPUs of the machine busy during the write (any
	// process), Steal the share the hypervisor took.
	CPUSeconds  float64 `json:"cpu_seconds"`
	MachineBusy float64 `json:"machine_busy"`
	Steal       float64 `json:"steal"`
	Err         string  `json:"error,omitempty"`
}

// cpuTimes reads the machine-wide CPU counters of /proc/stat (jiffies):
// busy (not idle, not iowait, not steal), steal and total.
func cpuTimes() (busy, steal, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, 0
	}
	var v [8]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
		total += v[i]
	}
	// user nice system idle iowait irq softirq steal
	return total - v[3] - v[4] - v[7], v[7], total
}

// childWrite does what the write_image step does (ramdisk/steps): the
// device from sysfs, image.Write from the URL with the checksum, a
// progress callback.
func childWrite(args []string) int {
	fs := flag.NewFlagSet(childWriteCmd, flag.ContinueOnError)
	url := fs.String("url", "", "image URL")
	file := fs.String("file", "", "read the image from this file (image.Source.Reader, the page cache, as dd reads it) instead of -url")
	devPath := fs.String("dev", "", "target device")
	sum := fs.String("checksum", "", "sha256 of the image file")
	noSum := fs.Bool("no-checksum", false, "diagnostic only: write without a checksum (InsecureSkipChecksum)")
	bufBytes := fs.Int("buffer-bytes", 0, "image.Options.BufferBytes (0: the default)")
	buffers := fs.Int("buffers", 0, "image.Options.Buffers (0: the default)")
	depth := fs.Int("write-depth", 0, "image.Options.WriteDepth (0: the default)")
	idle := fs.Bool("idle", false, "only report the peak RSS of the process as started")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the write to this file")
	traceFile := fs.String("trace", "", "write an execution trace (runtime/trace) of the write to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *traceFile != "" {
		f, err := os.Create(*traceFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer trace.Stop()
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := childResult{IdleHWMKiB: vmHWM("self")}
	if *idle {
		out.VmHWMKiB = out.IdleHWMKiB
		_ = json.NewEncoder(os.Stdout).Encode(out)
		return 0
	}
	dev, err := disk.FromPath(*devPath, "")
	if err == nil {
		err = joinCgroupFromEnv()
	}
	if err == nil {
		var progress float64
		b0, s0, t0j := cpuTimes()
		t0 := time.Now()
		src := image.Source{URL: *url}
		if *file != "" {
			f, ferr := os.Open(*file)
			if ferr != nil {
				fmt.Fprintln(os.Stderr, ferr)
				return 2
			}
			defer f.Close()
			st, ferr := f.Stat()
			if ferr != nil {
				fmt.Fprintln(os.Stderr, ferr)
				return 2
			}
			// Only Read: as from the network, without a WriterTo.
			src = image.Source{Reader: onlyReader{f}, Size: st.Size()}
		}
		var res image.Result
		res, err = image.Write(ctx, src, dev, image.Options{Checksum: *sum, InsecureSkipChecksum: *noSum, BufferBytes: *bufBytes, Buffers: *buffers, WriteDepth: *depth, Progress: func(p image.Progress) {
			if p.DownloadTotal > 0 {
				progress = float64(p.Downloaded) / float64(p.DownloadTotal)
			}
		}})
		out.Seconds = time.Since(t0).Seconds()
		if b1, s1, t1j := cpuTimes(); t1j > t0j {
			out.MachineBusy, out.Steal = float64(b1-b0)/float64(t1j-t0j), float64(s1-s0)/float64(t1j-t0j)
		}
		var ru unix.Rusage
		if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
			out.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		}
		out.Written, out.Downloaded, out.Compression, out.Checksum = res.Written, res.Downloaded, res.Compression, res.Checksum
		if err == nil && progress != 1 {
			err = fmt.Errorf("last progress was %.3f, not 1", progress)
		}
	}
	out.VmHWMKiB = vmHWM("self")
	if err != nil {
		out.Err = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	if err != nil {
		return 1
	}
	return 0
}

// profileArgs adds the tuning flags and, when -cpuprofile DIR or -trace
// DIR is set, -cpuprofile or -trace for the child.
func profileArgs(cfg config, name string, args ...string) []string {
	if cfg.bufferBytes != 0 {
		args = append(args, "-buffer-bytes", strconv.Itoa(cfg.bufferBytes))
	}
	if cfg.buffers != 0 {
		args = append(args, "-buffers", strconv.Itoa(cfg.buffers))
	}
	if cfg.writeDepth != 0 {
		args = append(args, "-write-depth", strconv.Itoa(cfg.writeDepth))
	}
	if cfg.profileDir != "" {
		args = append(args, "-cpuprofile", filepath.Join(cfg.profileDir, name+".pprof"))
	}
	if cfg.traceDir != "" {
		args = append(args, "-trace", filepath.Join(cfg.traceDir, name+".trace"))
	}
	return args
}

// vmHWM reads VmHWM (peak resident set) in KiB from /proc/PID/status.
func vmHWM(pid string) int64 {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}

// runChild runs the writer child and returns its report.
func runChild(ctx context.Context, args ...string) (childResult, error) {
	return runChildEnv(ctx, nil, args...)
}

// runChildEnv runs the writer child with env added to this process's.
func runChildEnv(ctx context.Context, env []string, args ...string) (childResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return childResult{}, err
	}
	return runBinary(ctx, exe, env, args...)
}

// runBinary runs exe (this bench, or another build of it given by
// -compare-writer) as the writer child.
func runBinary(ctx context.Context, exe string, env []string, args ...string) (childResult, error) {
	var res childResult
	cmd := exec.CommandContext(ctx, exe, append([]string{childWriteCmd}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, runErr := cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return res, fmt.Errorf("image writer child: %v (output %q)", runErr, out)
	}
	if res.Err != "" {
		return res, fmt.Errorf("image writer child: %s", res.Err)
	}
	if runErr != nil {
		return res, fmt.Errorf("image writer child: %v", runErr)
	}
	return res, nil
}

// makeImage writes size pseudo-random bytes (incompressible, like an
// encrypted or already-compressed payload) and returns their sha256.
func makeImage(ctx context.Context, p string, size int64) (string, error) {
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	rng := rand.NewChaCha8([32]byte{2})
	buf := make([]byte, 4<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n := min(int64(len(buf)), size-off)
		_, _ = rng.Read(buf[:n])
		h.Write(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			return "", err
		}
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), f.Close()
}

// makeZstd compresses src into dst and returns the sha256 of dst, which
// is what Ironic's checksum of a compressed image refers to.
func makeZstd(ctx context.Context, src, dst string) (string, int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", 0, err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return "", 0, err
	}
	defer out.Close()
	h := sha256.New()
	zw, err := zstd.NewWriter(io.MultiWriter(out, h), zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return "", 0, err
	}
	if _, err := io.Copy(zw, ctxReader{ctx, in}); err != nil {
		return "", 0, err
	}
	if err := zw.Close(); err != nil {
		return "", 0, err
	}
	if err := out.Sync(); err != nil {
		return "", 0, err
	}
	st, err := out.Stat()
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), st.Size(), out.Close()
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// serveFiles serves the files of dir by name on 127.0.0.1 (Range and
// Content-Length as any static server; the kernel's sendfile does the
// copying, so the server costs little CPU).
func serveFiles(dir string, names []string, cleanups *[]func()) (string, error) {
	allowed := map[string]bool{}
	for _, n := range names {
		allowed[n] = true
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := path.Base(r.URL.Path)
		if !allowed[name] {
			http.NotFound(w, r)
			return
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, name, st.ModTime(), f)
	})}
	go func() { _ = srv.Serve(ln) }()
	*cleanups = append(*cleanups, func() { srv.Close() })
	return "http://" + ln.Addr().String(), nil
}

// markDevice zeroes the first and last 4 MiB of the device (untimed,
// before every write, dd's and ours) so that the read-back check after a
// project write proves that this write, not an earlier one, put the image
// there.
func markDevice(p string, size int64) error {
	f, err := os.OpenFile(p, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	z := alignedBuf(4 << 20)
	for _, off := range []int64{0, size - int64(len(z))} {
		if _, err := f.WriteAt(z, off); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// deviceSHA256 reads the first n bytes of the device with O_DIRECT.
func deviceSHA256(p string, n int64) (string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	buf := alignedBuf(4 << 20)
	for off := int64(0); off < n; {
		want := min(int64(len(buf)), n-off)
		// O_DIRECT wants whole blocks: read a full aligned buffer and
		// hash only what belongs to the image.
		m, err := f.ReadAt(buf, off)
		if int64(m) < want {
			return "", fmt.Errorf("read back %s at %d: %v", p, off, err)
		}
		h.Write(buf[:want])
		off += want
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func imageBench(ctx context.Context, cfg config, tmp string, l *loopDev, cleanups *[]func()) ([]row, error) {
	fmt.Printf("== write_image (image.Write as the write_image step calls it, in a child process; sha256 checksum; HTTP from this process on 127.0.0.1)\n")
	size := cfg.imageSize
	raw := filepath.Join(tmp, "image.raw")
	fmt.Printf("  generating a %d MiB random raw image...\n", size>>20)
	sum, err := makeImage(ctx, raw, size)
	if err != nil {
		return nil, err
	}
	names := []string{"image.raw"}
	var zsum string
	var zsize int64
	if cfg.zstd {
		fmt.Printf("  compressing it with zstd (random data: it stays about as large, the decoder still runs)...\n")
		if zsum, zsize, err = makeZstd(ctx, raw, filepath.Join(tmp, "image.raw.zst")); err != nil {
			return nil, err
		}
		names = append(names, "image.raw.zst")
	}
	base, err := serveFiles(tmp, names, cleanups)
	if err != nil {
		return nil, err
	}
	ddArgs := []string{"if=" + raw, "of=" + l.path, "bs=4M", "oflag=direct", "conv=fsync", "status=none"}
	fmt.Printf("  baseline: dd %s (the image file is in the page cache, as the server's is)\n", strings.ReplaceAll(strings.Join(ddArgs, " "), tmp, "$TMP"))
	fmt.Printf("  project, same source as dd: image.Write of $TMP/image.raw (image.Source.Reader, the page cache) with its sha256, default options\n")
	fmt.Printf("  project over HTTP: image.Write of %s/image.raw with its sha256, default HTTP client and options (the server runs on the same CPUs)\n", base)

	// The idle child: the writer binary's own footprint before any work.
	idle, err := runChild(ctx, "-idle")
	if err != nil {
		return nil, err
	}
	// Builds of the bench before -file existed can only write over HTTP.
	otherFile := cfg.compareWriter != ""
	if otherFile {
		if _, err := runBinary(ctx, cfg.compareWriter, nil, "-idle", "-file", raw); err != nil {
			otherFile = false
			fmt.Printf("  -compare-writer has no -file: it writes over HTTP only\n")
		}
	}

	// Each repetition runs dd, the SHA-256 stream and the project from
	// both sources (and, with -compare-writer, the other build's writer)
	// back to back, in an order that rotates from one repetition to the
	// next: the machine is shared, and its load drifts, so every side of
	// a comparison is measured under about the same load.
	//
	// Two sources, because dd and the writer over HTTP do not read the
	// same thing: dd reads the image file from the page cache, the writer
	// over HTTP receives it from a server that runs on the same CPUs
	// (sendfile, the loopback TCP path on both ends). The writer from the
	// file reads exactly what dd reads, the like-for-like comparison; the
	// writer over HTTP is the write_image step as it runs, with the
	// server's cost on top, which a node does not pay.
	var dds, hashes, ours, oursFile, others, othersFile, fileHashes []time.Duration
	var hwm int64
	load0 := loadAvg()
	for i := range cfg.reps {
		var dd, hashT, our, ourFile, other, otherF time.Duration
		var otherRes, otherFRes childResult
		runDD := func() error {
			if err := freshDevice(l.path, cfg.size); err != nil {
				return err
			}
			d, err := timeCmd(ctx, "dd", ddArgs...)
			dd = d
			return err
		}
		runHash := func() error {
			hashT = hashTime(size)
			f, err := hashFileTime(raw, size)
			fileHashes = append(fileHashes, f)
			return err
		}
		// write runs one writer child (exe "" is this bench) and checks
		// the device after it.
		write := func(exe, name string, source ...string) (childResult, time.Duration, error) {
			if err := freshDevice(l.path, cfg.size); err != nil {
				return childResult{}, 0, err
			}
			args := append(source, "-dev", l.path, "-checksum", sum)
			var r childResult
			var err error
			if exe == "" {
				r, err = runChild(ctx, profileArgs(cfg, name, args...)...)
			} else {
				r, err = runBinary(ctx, exe, nil, args...)
			}
			if err != nil {
				return r, 0, err
			}
			if exe == "" {
				hwm = max(hwm, r.VmHWMKiB)
			}
			return r, time.Duration(r.Seconds * float64(time.Second)), checkImage(l.path, size, sum, r)
		}
		var res, resFile childResult
		runOurs := func() (err error) {
			res, our, err = write("", fmt.Sprintf("write-raw-%d", i+1), "-url", base+"/image.raw")
			return err
		}
		runOursFile := func() (err error) {
			resFile, ourFile, err = write("", fmt.Sprintf("write-raw-file-%d", i+1), "-file", raw)
			return err
		}
		steps := []func() error{runDD, runHash, runOursFile, runOurs}
		if cfg.compareWriter != "" {
			steps = append(steps, func() (err error) {
				otherRes, other, err = write(cfg.compareWriter, "", "-url", base+"/image.raw")
				if err != nil {
					err = fmt.Errorf("-compare-writer: %w", err)
				}
				return err
			})
			if otherFile {
				steps = append(steps, func() (err error) {
					otherFRes, otherF, err = write(cfg.compareWriter, "", "-file", raw)
					if err != nil {
						err = fmt.Errorf("-compare-writer: %w", err)
					}
					return err
				})
			}
		}
		if err := rotate(i, steps...); err != nil {
			return nil, err
		}
		dds, hashes, ours, oursFile = append(dds, dd), append(hashes, hashT), append(ours, our), append(oursFile, ourFile)
		bound := max(dd, hashT)
		fmt.Printf("  rep %d (load %s): dd %s (%.0f MB/s) | sha256 stream %s (%.0f MB/s); device read back matches after every project write\n",
			i+1, loadAvg(), secs(dd), mbps(size, dd), secs(hashT), mbps(size, hashT))
		fmt.Printf("         project, same source as dd: %s (%.0f MB/s, %.1f%% of min(dd, sha256)), peak RSS %.1f MiB, %s\n",
			secs(ourFile), mbps(size, ourFile), 100*bound.Seconds()/ourFile.Seconds(), float64(resFile.VmHWMKiB)/1024, cpuNote(resFile))
		fmt.Printf("         project over HTTP:          %s (%.0f MB/s, %.1f%% of min(dd, sha256)), peak RSS %.1f MiB, %s\n",
			secs(our), mbps(size, our), 100*bound.Seconds()/our.Seconds(), float64(res.VmHWMKiB)/1024, cpuNote(res))
		if cfg.compareWriter != "" {
			others = append(others, other)
			if otherFile {
				othersFile = append(othersFile, otherF)
				fmt.Printf("         -compare-writer, same source as dd: %s (%.0f MB/s, %.1f%% of min(dd, sha256)), peak RSS %.1f MiB, %s\n",
					secs(otherF), mbps(size, otherF), 100*bound.Seconds()/otherF.Seconds(), float64(otherFRes.VmHWMKiB)/1024, cpuNote(otherFRes))
			}
			fmt.Printf("         -compare-writer over HTTP:          %s (%.0f MB/s, %.1f%% of min(dd, sha256)), peak RSS %.1f MiB, %s\n",
				secs(other), mbps(size, other), 100*bound.Seconds()/other.Seconds(), float64(otherRes.VmHWMKiB)/1024, cpuNote(otherRes))
		}
	}
	dd, hashT, our, ourFile := median(dds), median(hashes), median(ours), median(oursFile)
	ratio := dd.Seconds() / our.Seconds()
	// The bound is the slower of the two sides: dd (the device) and one
	// SHA-256 stream (a single digest cannot use more than one core).
	bound := max(dd, hashT)
	bestBound := max(minDur(dds), minDur(hashes))
	// toBound is a writer's ratio to min(dd, sha256): of the medians and
	// of the bests.
	toBound := func(w []time.Duration) (float64, float64) {
		return bound.Seconds() / median(w).Seconds(), bestBound.Seconds() / minDur(w).Seconds()
	}
	boundRatio, bestRatio := toBound(ours)
	fileRatio, fileBest := toBound(oursFile)
	fmt.Printf("  load average before %s, after %s (2 CPUs shared with other work)\n", load0, loadAvg())
	fmt.Printf("  dd:            median %.0f MB/s, best %.0f MB/s (each: %s)\n", mbps(size, dd), mbps(size, minDur(dds)), durations(dds))
	fmt.Printf("  sha256 stream: median %.0f MB/s, best %.0f MB/s (one core, 4 MiB buffers in memory; each: %s)\n", mbps(size, hashT), mbps(size, minDur(hashes)), durations(hashes))
	fmt.Printf("  diagnostic: sha256 of the image file read in 4 MiB pieces (page cache, one core): median %.0f MB/s, best %.0f MB/s (each: %s)\n", mbps(size, median(fileHashes)), mbps(size, minDur(fileHashes)), durations(fileHashes))
	fmt.Printf("  project, same source as dd: median %.0f MB/s, best %.0f MB/s (each: %s)\n", mbps(size, ourFile), mbps(size, minDur(oursFile)), durations(oursFile))
	fmt.Printf("  project over HTTP:          median %.0f MB/s, best %.0f MB/s (each: %s)\n", mbps(size, our), mbps(size, minDur(ours)), durations(ours))
	fmt.Printf("  project / min(dd, sha256): same source as dd %.1f%% of the medians, %.1f%% of the bests; over HTTP %.1f%% of the medians, %.1f%% of the bests\n", 100*fileRatio, 100*fileBest, 100*boundRatio, 100*bestRatio)
	if cfg.compareWriter != "" {
		if otherFile {
			r, b := toBound(othersFile)
			fmt.Printf("  -compare-writer, same source as dd: median %.0f MB/s, best %.0f MB/s (each: %s): %.1f%% of min(dd, sha256) of the medians, %.1f%% of the bests\n",
				mbps(size, median(othersFile)), mbps(size, minDur(othersFile)), durations(othersFile), 100*r, 100*b)
		}
		r, b := toBound(others)
		fmt.Printf("  -compare-writer over HTTP:          median %.0f MB/s, best %.0f MB/s (each: %s): %.1f%% of min(dd, sha256) of the medians, %.1f%% of the bests\n",
			mbps(size, median(others)), mbps(size, minDur(others)), durations(others), 100*r, 100*b)
	}

	// Diagnostic: the same write without the checksum. Not a target; it
	// says where the time goes.
	var nosums []time.Duration
	var nosumNotes []string
	for range cfg.reps {
		if err := freshDevice(l.path, cfg.size); err != nil {
			return nil, err
		}
		r, err := runChild(ctx, profileArgs(cfg, fmt.Sprintf("write-nosum-%d", len(nosums)+1), "-url", base+"/image.raw", "-dev", l.path, "-no-checksum")...)
		if err != nil {
			return nil, err
		}
		if err := checkImage(l.path, size, sum, r); err != nil {
			return nil, err
		}
		nosums = append(nosums, time.Duration(r.Seconds*float64(time.Second)))
		nosumNotes = append(nosumNotes, cpuNote(r))
	}
	nosum := median(nosums)
	fmt.Printf("  diagnostic: project write without checksum %.0f MB/s = %.1f%% of dd (each: %s)\n", mbps(size, nosum), 100*dd.Seconds()/nosum.Seconds(), durations(nosums))
	fmt.Printf("  without checksum: %s\n", strings.Join(nosumNotes, "; "))
	fmt.Printf("  peak RSS of the writer child: VmHWM %.1f MiB; the same binary idle: %.1f MiB\n",
		float64(hwm)/1024, float64(idle.IdleHWMKiB)/1024)
	rows := []row{
		{"write_image raw + sha256 / min(dd, sha256) (" + sizeName(size) + "), same source as dd", fmt.Sprintf("%.1f%% (%.0f vs %.0f MB/s; bests %.1f%%)", 100*fileRatio, mbps(size, ourFile), mbps(size, bound), 100*fileBest), "≥ 90%", metOrMissed(fileRatio >= targetImageRatio)},
		{"write_image raw + sha256 / min(dd, sha256) (" + sizeName(size) + "), over HTTP", fmt.Sprintf("%.1f%% (%.0f vs %.0f MB/s; bests %.1f%%)", 100*boundRatio, mbps(size, our), mbps(size, bound), 100*bestRatio), "≥ 90%", metOrMissed(boundRatio >= targetImageRatio)},
		{"  dd", fmt.Sprintf("%.0f MB/s (best %.0f)", mbps(size, dd), mbps(size, minDur(dds))), "-", "-"},
		{"  sha256 stream, one core", fmt.Sprintf("%.0f MB/s (best %.0f)", mbps(size, hashT), mbps(size, minDur(hashes))), "-", "-"},
		{"  diagnostic: sha256 of the image file (page cache)", fmt.Sprintf("%.0f MB/s (best %.0f)", mbps(size, median(fileHashes)), mbps(size, minDur(fileHashes))), "-", "-"},
		{"  write_image raw + sha256 / dd", fmt.Sprintf("%.1f%%", 100*ratio), "-", "-"},
		{"  diagnostic: write_image without checksum / dd", fmt.Sprintf("%.1f%% (%.0f MB/s)", 100*dd.Seconds()/nosum.Seconds(), mbps(size, nosum)), "-", "-"},
	}

	trows, err := throttledBench(ctx, cfg, l, raw, base+"/image.raw", sum, cleanups)
	if err != nil {
		return nil, err
	}
	rows = append(rows, trows...)

	zhwm := int64(0)
	if cfg.zstd {
		var zs []time.Duration
		for i := range cfg.reps {
			if err := freshDevice(l.path, cfg.size); err != nil {
				return nil, err
			}
			r, err := runChild(ctx, profileArgs(cfg, fmt.Sprintf("write-zstd-%d", i+1), "-url", base+"/image.raw.zst", "-dev", l.path, "-checksum", zsum)...)
			if err != nil {
				return nil, err
			}
			if err := checkImage(l.path, size, sum, r); err != nil {
				return nil, err
			}
			d := time.Duration(r.Seconds * float64(time.Second))
			zs = append(zs, d)
			zhwm = max(zhwm, r.VmHWMKiB)
			fmt.Printf("  zstd rep %d: %s (%.0f MB/s of image, %d MiB downloaded), peak RSS %.1f MiB, %s\n", i+1, secs(d), mbps(size, d), zsize>>20, float64(r.VmHWMKiB)/1024, cpuNote(r))
		}
		z := median(zs)
		zr := dd.Seconds() / z.Seconds()
		fmt.Printf("  zstd median: %.0f MB/s: %.1f%% of the raw dd median\n", mbps(size, z), 100*zr)
		rows = append(rows, row{"write_image zstd + sha256 / dd (optional)", fmt.Sprintf("%.1f%% (%.0f MB/s)", 100*zr, mbps(size, z)), "-", "-"})
	}
	fmt.Println()
	rows = append(rows, row{"peak RSS writing the " + sizeName(size) + " raw image (VmHWM)", fmt.Sprintf("%.1f MiB", float64(hwm)/1024), "≤ 64 MiB", metOrMissed(hwm <= targetRSSMiB*1024)})
	if cfg.zstd {
		rows = append(rows, row{"peak RSS writing the zstd image (VmHWM)", fmt.Sprintf("%.1f MiB", float64(zhwm)/1024), "≤ 64 MiB", metOrMissed(zhwm <= targetRSSMiB*1024)})
	}
	return rows, nil
}

// cpuNote says how much CPU a write took and how busy the machine was.
func cpuNote(r childResult) string {
	return fmt.Sprintf("writer CPU %.2f s, machine %.0f%% busy (steal %.0f%%)", r.CPUSeconds, 100*r.MachineBusy, 100*r.Steal)
}

// hashTime is how long sha256 takes over size bytes held in memory, on
// this goroutine: the ceiling a streamed checksum puts on write_image.
func hashTime(size int64) time.Duration {
	buf := make([]byte, 4<<20)
	rng := rand.NewChaCha8([32]byte{3})
	_, _ = rng.Read(buf)
	h := sha256.New()
	t0 := time.Now()
	for off := int64(0); off < size; off += int64(len(buf)) {
		h.Write(buf[:min(int64(len(buf)), size-off)])
	}
	_ = h.Sum(nil)
	return time.Since(t0)
}

// loadAvg is the machine's 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

func minDur(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d[1:] {
		m = min(m, x)
	}
	return m
}

// rotate runs steps starting with step rep (mod their number), so that
// over the repetitions each runs first, second, ... in turn.
func rotate(rep int, steps ...func() error) error {
	for k := range steps {
		if err := steps[(rep+k)%len(steps)](); err != nil {
			return err
		}
	}
	return nil
}

// hashFileTime is how long sha256 takes over the first size bytes of the
// file p read in 4 MiB pieces (from the page cache: the bench wrote it):
// one SHA-256 stream of data that is not already in the CPU's cache.
func hashFileTime(p string, size int64) (time.Duration, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 4<<20)
	h := sha256.New()
	t0 := time.Now()
	if _, err := io.CopyBuffer(h, io.LimitReader(onlyReader{f}, size), buf); err != nil {
		return 0, err
	}
	_ = h.Sum(nil)
	return time.Since(t0), nil
}

// onlyReader hides WriterTo/ReaderFrom so that io.CopyBuffer uses buf.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// checkImage checks the child's report and reads the device back: it
// must hold exactly the image.
func checkImage(dev string, size int64, sum string, r childResult) error {
	if r.Written != uint64(size) {
		return fmt.Errorf("the writer reported %d bytes written, want %d", r.Written, size)
	}
	got, err := deviceSHA256(dev, size)
	if err != nil {
		return err
	}
	if got != sum {
		return fmt.Errorf("after the write %s does not hold the image: sha256 %s, want %s", dev, got, sum)
	}
	return nil
}
