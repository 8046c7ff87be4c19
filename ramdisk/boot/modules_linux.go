package boot

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/u-root/u-root/pkg/kmodule"
	"golang.org/x/sys/unix"
)

// ModuleOptions tune LoadModules; the zero value is right for the ramdisk.
type ModuleOptions struct {
	Root      string        // "" or "/": the live system; else a root for tests
	KVer      string        // kernel release; default uname -r
	MaxPasses int           // default 10
	Settle    time.Duration // pause between passes for devices to appear; default 250ms
	// Tried, when not nil, holds the modules earlier calls tried (loaded
	// or failed) and is updated: calls that share it never retry a module
	// that failed (rescans while waiting for late devices).
	Tried map[string]bool
}

// ModuleReport says what LoadModules did.
type ModuleReport struct {
	Loaded []string          // modules loaded, in order
	Failed map[string]string // module -> error
	Passes int
}

// LoadModules coldplugs the kernel modules the hardware needs: it reads
// every device's modalias (ReadModaliases), matches it against
// /lib/modules/KVER/modules.alias and loads the matching modules with
// their modules.dep dependencies, then does it again, because a loaded
// driver (virtio_pci, a SCSI host) makes new devices appear, until a
// pass loads nothing new. Failures to load single modules are reported,
// not fatal: real servers have devices without drivers in the image.
// The error is for a missing module tree or an unreadable /sys.
func LoadModules(ctx context.Context, opts ModuleOptions, logf func(string, ...any)) (ModuleReport, error) {
	rep := ModuleReport{Failed: map[string]string{}}
	if opts.MaxPasses == 0 {
		opts.MaxPasses = 10
	}
	if opts.Settle == 0 {
		opts.Settle = 250 * time.Millisecond
	}
	if opts.KVer == "" {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			return rep, fmt.Errorf("uname: %w", err)
		}
		opts.KVer = unix.ByteSliceToString(u.Release[:])
	}
	modDir := filepath.Join(opts.Root, "/lib/modules", opts.KVer)
	f, err := os.Open(filepath.Join(modDir, "modules.alias"))
	if err != nil {
		return rep, fmt.Errorf("no kernel modules for %s: %w", opts.KVer, err)
	}
	table, err := ParseAliases(f)
	f.Close()
	if err != nil {
		return rep, err
	}
	sysfs := os.DirFS(filepath.Join(opts.Root, "/sys"))

	tried := opts.Tried
	if tried == nil {
		tried = map[string]bool{}
	}
	quiet := 0 // consecutive passes that loaded nothing
	for rep.Passes < opts.MaxPasses {
		rep.Passes++
		aliases, err := ReadModaliases(sysfs)
		if err != nil {
			return rep, fmt.Errorf("read modaliases: %w", err)
		}
		skip := loadedModules(filepath.Join(opts.Root, "/proc/modules"))
		for m := range tried {
			skip[m] = true
		}
		want := table.ModulesFor(aliases, skip)
		if len(want) > 0 {
			// A fresh prober each pass: it snapshots /proc/modules.
			prober, err := kmodule.NewProber(kmodule.ProbeOpts{RootDir: opts.Root, KVer: opts.KVer})
			if err != nil {
				return rep, fmt.Errorf("read modules.dep: %w", err)
			}
			for _, m := range want {
				tried[m] = true
				start := time.Now()
				if err := prober.Probe(m, ""); err != nil {
					rep.Failed[m] = err.Error()
					logf("module %s: %v", m, err)
					continue
				}
				rep.Loaded = append(rep.Loaded, m)
				logf("module %s loaded (%s)", m, time.Since(start).Round(time.Millisecond))
			}
		}
		if len(want) == 0 {
			quiet++
			// Two quiet passes a settle time apart: asynchronous probes
			// (SCSI scans, PCI bridges) get a chance to show up.
			if quiet >= 2 {
				break
			}
		} else {
			quiet = 0
		}
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(opts.Settle):
		}
	}
	return rep, nil
}

// loadedModules reads the names of loaded modules from /proc/modules.
func loadedModules(path string) map[string]bool {
	out := map[string]bool{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, _, ok := strings.Cut(sc.Text(), " "); ok {
			out[NormalizeModule(name)] = true
		}
	}
	return out
}
