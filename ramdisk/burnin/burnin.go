// Package burnin stresses the node's CPUs and memory from the ramdisk
// (IPA's burnin_cpu and burnin_memory, Go-native instead of stress-ng) and
// measures what it did; the disk burn-in is disk.BurnIn. Every check has
// a known right answer, so that a burn-in can fail rather than only heat
// the machine.
package burnin

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CPUOptions tunes CPU.
type CPUOptions struct {
	Duration time.Duration
	// Workers is the number of goroutines, each locked to a thread; 0
	// means one per online CPU.
	Workers int
	// Progress, if set, gets the fraction of the duration done.
	Progress func(float64)
}

// CPUResult is what CPU measured.
type CPUResult struct {
	Workers int     `json:"workers"`
	Seconds float64 `json:"seconds"`
	// Rounds is the number of checked rounds (a SHA-256 chain and a
	// floating-point series, each compared with the reference).
	Rounds          uint64  `json:"rounds"`
	RoundsPerSecond float64 `json:"rounds_per_second"`
	Errors          uint64  `json:"errors"`
}

const (
	shaChain  = 256
	fpTerms   = 2048
	shaLength = 4096
)

// cpuRound computes one round: a SHA-256 chain over a buffer and a
// floating-point series, both deterministic.
func cpuRound(buf []byte) ([32]byte, float64) {
	sum := sha256.Sum256(buf)
	for i := 1; i < shaChain; i++ {
		copy(buf, sum[:])
		sum = sha256.Sum256(buf)
	}
	s := 0.0
	for k := 1; k <= fpTerms; k++ {
		x := float64(k)
		s += math.Sqrt(x)*math.Sin(x) + 1/(x*x)
	}
	return sum, s
}

func seedBuffer() []byte {
	buf := make([]byte, shaLength)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	return buf
}

// CPU runs the compute loop on Workers threads for Duration, comparing
// every round with a reference computed first; a differing round is an
// error (a CPU or cache fault, or a machine too hot to compute right).
func CPU(ctx context.Context, opts CPUOptions) (CPUResult, error) {
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	res := CPUResult{Workers: workers}
	wantSum, wantFP := cpuRound(seedBuffer())
	start := time.Now()
	deadline := start.Add(opts.Duration)
	var rounds, errs atomic.Uint64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				sum, fp := cpuRound(seedBuffer())
				if sum != wantSum || fp != wantFP {
					errs.Add(1)
				}
				rounds.Add(1)
			}
		}()
	}
	waitReporting(&wg, start, opts.Duration, opts.Progress)
	res.Seconds = time.Since(start).Seconds()
	res.Rounds, res.Errors = rounds.Load(), errs.Load()
	if res.Seconds > 0 {
		res.RoundsPerSecond = float64(res.Rounds) / res.Seconds
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("CPU burn-in cancelled after %.0fs: %w", res.Seconds, err)
	}
	if res.Errors > 0 {
		return res, fmt.Errorf("CPU burn-in: %d of %d rounds computed a wrong result on %d workers; the CPU, its cache or its cooling is faulty", res.Errors, res.Rounds, workers)
	}
	return res, nil
}

// MemoryOptions tunes Memory.
type MemoryOptions struct {
	Duration time.Duration
	// Workers share the tested memory; 0 means one per online CPU.
	Workers int
	// Bytes is "N%" of the available memory or a size ("512M", "2G",
	// "1048576"); "" means the ceiling.
	Bytes string
	// MeminfoPath is /proc/meminfo (tests point elsewhere).
	MeminfoPath string
	// Progress, if set, gets the fraction of the duration done.
	Progress func(float64)
}

// MemoryResult is what Memory measured.
type MemoryResult struct {
	Workers        int     `json:"workers"`
	Seconds        float64 `json:"seconds"`
	AvailableBytes uint64  `json:"available_bytes"`
	TestedBytes    uint64  `json:"tested_bytes"`
	Passes         uint64  `json:"passes"`
	BytesChecked   uint64  `json:"bytes_checked"`
	MBps           float64 `json:"mb_per_s"`
	Errors         uint64  `json:"errors"`
	FirstError     string  `json:"first_error,omitempty"`
}

// MemoryReserve is kept free for the ramdisk itself (its files live in
// memory) and the kernel.
const MemoryReserve = 64 << 20

// MemoryCeilingPercent bounds the share of the available memory tested.
const MemoryCeilingPercent = 90

// Available reads MemAvailable from meminfo.
func Available(meminfo string) (uint64, error) {
	if meminfo == "" {
		meminfo = "/proc/meminfo"
	}
	f, err := os.Open(meminfo)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: MemAvailable %q: %w", meminfo, fields[1], err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s has no MemAvailable line", meminfo)
}

// MemorySize turns the Bytes option into a byte count for the available
// memory, bounded by the ceiling (MemoryCeilingPercent of the available
// memory less MemoryReserve); it refuses what it cannot parse.
func MemorySize(spec string, avail uint64) (uint64, error) {
	ceiling := avail / 100 * MemoryCeilingPercent
	if ceiling <= MemoryReserve {
		return 0, fmt.Errorf("only %d MiB of memory is available; the memory burn-in needs more than %d MiB", avail>>20, MemoryReserve>>20)
	}
	ceiling -= MemoryReserve
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return ceiling, nil
	}
	var n uint64
	if p, ok := strings.CutSuffix(spec, "%"); ok {
		pct, err := strconv.ParseFloat(p, 64)
		if err != nil || pct <= 0 || pct > 100 {
			return 0, fmt.Errorf("memory share %q: want a percentage between 0 and 100, e.g. \"50%%\"", spec)
		}
		n = uint64(float64(avail) * pct / 100)
	} else {
		mult := uint64(1)
		num := spec
		switch strings.ToUpper(spec[len(spec)-1:]) {
		case "K":
			mult, num = 1<<10, spec[:len(spec)-1]
		case "M":
			mult, num = 1<<20, spec[:len(spec)-1]
		case "G":
			mult, num = 1<<30, spec[:len(spec)-1]
		case "T":
			mult, num = 1<<40, spec[:len(spec)-1]
		}
		v, err := strconv.ParseUint(num, 10, 64)
		if err != nil || v == 0 {
			return 0, fmt.Errorf("memory size %q: want a size such as \"512M\", \"2G\" or a percentage such as \"50%%\"", spec)
		}
		n = v * mult
	}
	n = min(n, ceiling)
	return n &^ (1<<20 - 1), nil
}

// Memory maps the chosen share of memory and, for Duration, writes
// patterns over it (address-derived, then its inverse, each pass with a
// new seed) and reads them back, Workers goroutines each on its own
// slice. The memory is returned to the kernel afterwards.
func Memory(ctx context.Context, opts MemoryOptions) (MemoryResult, error) {
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	res := MemoryResult{Workers: workers}
	avail, err := Available(opts.MeminfoPath)
	if err != nil {
		return res, fmt.Errorf("memory burn-in: %w", err)
	}
	res.AvailableBytes = avail
	size, err := MemorySize(opts.Bytes, avail)
	if err != nil {
		return res, fmt.Errorf("memory burn-in: %w", err)
	}
	if size < uint64(workers)<<20 {
		return res, fmt.Errorf("memory burn-in: %d MiB for %d workers is too little; give at least 1 MiB per worker", size>>20, workers)
	}
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return res, fmt.Errorf("memory burn-in: cannot map %d MiB: %w; ask for less with agent_burnin_vm_vm-bytes", size>>20, err)
	}
	defer unix.Munmap(mem)
	res.TestedBytes = size
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), len(mem)/8)
	per := len(words) / workers
	start := time.Now()
	deadline := start.Add(opts.Duration)
	var checked, passes, errs atomic.Uint64
	var firstErr atomic.Pointer[string]
	var wg sync.WaitGroup
	for w := range workers {
		part := words[w*per : (w+1)*per]
		base := uint64(w * per * 8)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pass := uint64(0); ctx.Err() == nil && time.Now().Before(deadline); pass++ {
				seed := (pass + 1) * 0x9e3779b97f4a7c15
				invert := pass%2 == 1
				n := fillWords(ctx, part, base, seed, invert, deadline)
				bad, at, got, want := checkWords(part[:n], base, seed, invert)
				checked.Add(uint64(n) * 8)
				if bad > 0 {
					errs.Add(bad)
					msg := fmt.Sprintf("at offset %d read 0x%016x, wrote 0x%016x", at, got, want)
					firstErr.CompareAndSwap(nil, &msg)
				}
				if n == len(part) {
					passes.Add(1)
				}
			}
		}()
	}
	waitReporting(&wg, start, opts.Duration, opts.Progress)
	res.Seconds = time.Since(start).Seconds()
	res.BytesChecked, res.Passes, res.Errors = checked.Load(), passes.Load()/uint64(workers), errs.Load()
	if p := firstErr.Load(); p != nil {
		res.FirstError = *p
	}
	if res.Seconds > 0 {
		// Each checked byte was written once and read once.
		res.MBps = float64(2*res.BytesChecked) / 1e6 / res.Seconds
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("memory burn-in cancelled after %.0fs: %w", res.Seconds, err)
	}
	if res.Errors > 0 {
		return res, fmt.Errorf("memory burn-in: %d words of %d MiB tested read back wrong (first %s); the memory is faulty", res.Errors, size>>20, res.FirstError)
	}
	return res, nil
}

func pattern(addr, seed uint64, invert bool) uint64 {
	v := addr*0xff51afd7ed558ccd ^ seed
	v ^= v >> 29
	if invert {
		v = ^v
	}
	return v
}

// fillWords writes the pattern, stopping early (at a 1 MiB boundary) when
// the deadline passes or ctx ends; it returns how many words it wrote.
func fillWords(ctx context.Context, part []uint64, base, seed uint64, invert bool, deadline time.Time) int {
	const step = 1 << 17 // words: 1 MiB
	for i := 0; i < len(part); i += step {
		if i > 0 && (ctx.Err() != nil || !time.Now().Before(deadline)) {
			return i
		}
		end := min(i+step, len(part))
		for j := i; j < end; j++ {
			part[j] = pattern(base+uint64(j)*8, seed, invert)
		}
	}
	return len(part)
}

func checkWords(part []uint64, base, seed uint64, invert bool) (bad, at, got, want uint64) {
	for j, v := range part {
		if w := pattern(base+uint64(j)*8, seed, invert); v != w {
			if bad == 0 {
				at, got, want = base+uint64(j)*8, v, w
			}
			bad++
		}
	}
	return
}

// waitReporting waits for the workers of a burn-in, reporting the share
// of duration gone by each second (when progress is set).
func waitReporting(wg *sync.WaitGroup, start time.Time, duration time.Duration, progress func(float64)) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if progress != nil && duration > 0 {
				progress(min(1, float64(time.Since(start))/float64(duration)))
			}
		}
	}
}
