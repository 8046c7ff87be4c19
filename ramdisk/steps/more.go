package steps

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/ramdisk/burnin"
	"github.com/bmedge/bmedge/ramdisk/disk"
	"github.com/bmedge/bmedge/ramdisk/inventory"
)

// This file holds the manual clean steps of the standard ramdisk besides
// erase and inspection: burn-in, express erase, pstore, verification.
// Their arguments are IPA's driver_info names (drivers.Arg*); the
// coordinator fills them from the node's driver_info when the clean step
// does not set them.

// IPA's defaults.
const (
	defaultBurninSeconds = 86400
)

// argNumber reads a non-negative number argument given as a JSON number
// or a string (driver_info values are often strings).
func argNumber(args map[string]any, name string, def float64) (float64, error) {
	v, ok := args[name]
	if !ok || v == nil {
		return def, nil
	}
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case int:
		f = float64(x)
	case string:
		p, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, fmt.Errorf("argument %s=%q: want a number", name, x)
		}
		f = p
	default:
		return 0, fmt.Errorf("argument %s: want a number, got %T", name, v)
	}
	if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("argument %s=%v: want a number of at least 0", name, v)
	}
	return f, nil
}

// argBool reads a boolean argument given as true/false or a string.
func argBool(args map[string]any, name string, def bool) (bool, error) {
	v, ok := args[name]
	if !ok || v == nil {
		return def, nil
	}
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		b, err := strconv.ParseBool(strings.TrimSpace(x))
		if err != nil {
			return false, fmt.Errorf("argument %s=%q: want true or false", name, x)
		}
		return b, nil
	}
	return false, fmt.Errorf("argument %s: want true or false, got %T", name, v)
}

func argString(args map[string]any, name string) (string, error) {
	v, ok := args[name]
	if !ok || v == nil {
		return "", nil
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("argument %s: want a string, got %T", name, v)
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func (r *Runner) burninCPU(ctx context.Context, args map[string]any, progress func(float64, string)) (map[string]any, error) {
	secs, err := argNumber(args, drivers.ArgBurninCPUTimeout, defaultBurninSeconds)
	if err != nil {
		return nil, err
	}
	workers, err := argNumber(args, drivers.ArgBurninCPUWorkers, 0)
	if err != nil {
		return nil, err
	}
	res, err := burnin.CPU(ctx, burnin.CPUOptions{Duration: seconds(secs), Workers: int(workers),
		Progress: func(f float64) { progress(f, "cpu") }})
	account := fmt.Sprintf("%d workers, %d rounds checked in %.1fs (%.1f rounds/s), %d errors", res.Workers, res.Rounds, res.Seconds, res.RoundsPerSecond, res.Errors)
	r.Log.Info("cpu burn-in", "result", account)
	if err != nil {
		return nil, err
	}
	return map[string]any{"cpu": asMap(res), "summary": account}, nil
}

func (r *Runner) burninMemory(ctx context.Context, args map[string]any, progress func(float64, string)) (map[string]any, error) {
	secs, err := argNumber(args, drivers.ArgBurninVMTimeout, defaultBurninSeconds)
	if err != nil {
		return nil, err
	}
	workers, err := argNumber(args, drivers.ArgBurninVMWorkers, 0)
	if err != nil {
		return nil, err
	}
	size, err := argString(args, drivers.ArgBurninVMBytes)
	if err != nil {
		return nil, err
	}
	opts := burnin.MemoryOptions{Duration: seconds(secs), Workers: int(workers), Bytes: size,
		Progress: func(f float64) { progress(f, "memory") }}
	if r.Erase.ProcRoot != "" {
		opts.MeminfoPath = filepath.Join(r.Erase.ProcRoot, "meminfo")
	}
	res, err := burnin.Memory(ctx, opts)
	account := fmt.Sprintf("%d MiB tested by %d workers, %d bytes checked in %.1fs (%.0f MB/s), %d errors", res.TestedBytes>>20, res.Workers, res.BytesChecked, res.Seconds, res.MBps, res.Errors)
	r.Log.Info("memory burn-in", "result", account)
	if err != nil {
		return nil, err
	}
	return map[string]any{"memory": asMap(res), "summary": account}, nil
}

// protectedPolicy sorts devices for a destructive step: virtual media and
// the parameters medium are always skipped (as IPA skips virtual media);
// read-only and removable devices fail the step unless the operator set
// the argument that skips them (IPA's agent_erase_skip_read_only, and
// agent_erase_skip_removable). skipped maps device to the reason, said in
// the result.
func protectedPolicy(devs []disk.Device, args map[string]any, step string) (targets []disk.Device, skipped map[string]string, err error) {
	skipRO, err := argBool(args, drivers.ArgEraseSkipReadOnly, false)
	if err != nil {
		return nil, nil, err
	}
	skipRM, err := argBool(args, drivers.ArgEraseSkipRemovable, false)
	if err != nil {
		return nil, nil, err
	}
	skipped = map[string]string{}
	var refused []string
	for _, d := range devs {
		switch {
		case d.ParamsMedium:
			skipped[d.Path] = "the boot parameters medium"
		case d.VirtualMedia:
			skipped[d.Path] = "virtual media"
		case d.ReadOnly:
			if !skipRO {
				refused = append(refused, fmt.Sprintf("%s is read-only (set %s=true to skip it)", d.Path, drivers.ArgEraseSkipReadOnly))
				continue
			}
			skipped[d.Path] = "read-only, " + drivers.ArgEraseSkipReadOnly
		case d.Removable:
			if !skipRM {
				refused = append(refused, fmt.Sprintf("%s is removable (set %s=true to skip it)", d.Path, drivers.ArgEraseSkipRemovable))
				continue
			}
			skipped[d.Path] = "removable, " + drivers.ArgEraseSkipRemovable
		default:
			targets = append(targets, d)
		}
	}
	if len(refused) > 0 {
		return nil, nil, fmt.Errorf("%s cannot write to every device and was not told to skip these: %s; nothing was written", step, strings.Join(refused, "; "))
	}
	return targets, skipped, nil
}

func skippedParts(skipped map[string]string) []string {
	var out []string
	for p, why := range skipped {
		out = append(out, fmt.Sprintf("%s skipped (%s)", p, why))
	}
	sort.Strings(out)
	return out
}

func (r *Runner) burninDisk(ctx context.Context, args map[string]any, progress func(float64, string)) (map[string]any, error) {
	secs, err := argNumber(args, drivers.ArgBurninDiskRuntime, 0)
	if err != nil {
		return nil, err
	}
	loops, err := argNumber(args, drivers.ArgBurninDiskLoops, disk.DefaultBurnInLoops)
	if err != nil {
		return nil, err
	}
	if secs == 0 && loops < 1 {
		return nil, fmt.Errorf("burnin_disk: %s=0 and %s=%v: give a runtime in seconds or at least one loop", drivers.ArgBurninDiskRuntime, drivers.ArgBurninDiskLoops, loops)
	}
	devs, err := r.devices()
	if err != nil {
		return nil, err
	}
	targets, skipped, err := protectedPolicy(devs, args, "burnin_disk")
	if err != nil {
		return nil, err
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("burnin_disk: no disk to burn in (%d devices, none writable)", len(devs))
	}
	var mu sync.Mutex
	done := map[string]float64{}
	res, err := disk.BurnIn(ctx, targets, disk.BurnInOptions{Open: r.Erase.Open, ProcRoot: r.Erase.ProcRoot, NoDirect: r.Erase.NoDirect,
		Runtime: seconds(secs), Loops: int(loops),
		Progress: func(dev string, f float64) {
			mu.Lock()
			done[dev] = f
			var sum float64
			for _, v := range done {
				sum += v
			}
			mu.Unlock()
			progress(sum/float64(len(targets)), dev)
		}})
	parts := skippedParts(skipped)
	for _, x := range res {
		parts = append(parts, fmt.Sprintf("%s %.2f passes, %d bytes verified, write %.1f MB/s, read %.1f MB/s, %d I/O errors, %d mismatches",
			x.Device, x.Passes, x.BytesVerified, x.WriteMBps, x.ReadMBps, x.IOErrors, x.Mismatches))
	}
	account := summary(parts, "no disk")
	r.Log.Info("disk burn-in", "result", account)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, account)
	}
	return map[string]any{"devices": res, "summary": account}, nil
}

func (r *Runner) eraseExpress(ctx context.Context, args map[string]any) (map[string]any, error) {
	fallback, err := argBool(args, drivers.ArgContinueIfSecureEraseFail, false)
	if err != nil {
		return nil, err
	}
	hw, err := r.hardwareErasers(args)
	if err != nil {
		return nil, err
	}
	devs, err := r.devices()
	if err != nil {
		return nil, err
	}
	opts := disk.ExpressOptions{EraseOptions: r.Erase, Fallback: fallback, FallbackArg: drivers.ArgContinueIfSecureEraseFail}
	opts.Hardware = hw
	res, err := disk.EraseExpress(ctx, devs, opts)
	if err != nil {
		return nil, err
	}
	var parts []string
	for _, x := range res {
		if x.Skipped {
			parts = append(parts, fmt.Sprintf("%s skipped (%s)", x.Device, x.SkipReason))
			continue
		}
		p := fmt.Sprintf("%s %s in %.1fs", x.Device, x.Method, x.Seconds)
		if x.VerifiedSamples > 0 {
			p += fmt.Sprintf(", %d samples verified", x.VerifiedSamples)
		}
		parts = append(parts, p)
	}
	account := summary(parts, "no disk")
	r.Log.Info("express erase", "result", account)
	return map[string]any{"devices": res, "summary": account}, nil
}

// hardwareErasers applies agent_enable_nvme_secure_erase and
// agent_enable_ata_secure_erase to the runner's erasers.
func (r *Runner) hardwareErasers(args map[string]any) ([]disk.HardwareEraser, error) {
	nvme, err := argBool(args, drivers.ArgEnableNVMeSecureErase, true)
	if err != nil {
		return nil, err
	}
	ata, err := argBool(args, drivers.ArgEnableATASecureErase, true)
	if err != nil {
		return nil, err
	}
	hw := r.Erase.Hardware
	if hw == nil {
		hw = disk.DefaultHardwareErasers()
	}
	out := []disk.HardwareEraser{}
	for _, h := range hw {
		switch h.(type) {
		case disk.NVMeFormat, *disk.NVMeFormat:
			if !nvme {
				continue
			}
		case disk.ATASecurityErase, *disk.ATASecurityErase:
			if !ata {
				continue
			}
		}
		out = append(out, h)
	}
	return out, nil
}

// pstoreMount finds the pstore file system in mounts, or "".
func pstoreMount(mounts string) string {
	f, err := os.Open(mounts)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && fields[2] == "pstore" {
			return fields[1]
		}
	}
	return ""
}

// PstoreDir is where erase_pstore mounts pstore when it is not mounted.
var PstoreDir = "/sys/fs/pstore"

func (r *Runner) erasePstore(ctx context.Context) (map[string]any, error) {
	procRoot := r.Erase.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	dir := pstoreMount(filepath.Join(procRoot, "mounts"))
	mounted := false
	if dir == "" {
		if err := os.MkdirAll(PstoreDir, 0o700); err == nil {
			if err := unix.Mount("pstore", PstoreDir, "pstore", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err == nil {
				dir, mounted = PstoreDir, true
			} else if !errors.Is(err, unix.ENODEV) {
				r.Log.Info("pstore not mounted", "err", err)
			}
		}
	}
	if dir == "" {
		return map[string]any{"removed": []string{}, "summary": "no pstore on this node (the kernel offers none)"}, nil
	}
	if mounted {
		defer unix.Unmount(dir, 0)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("erase_pstore: cannot list %s: %w", dir, err)
	}
	removed := []string{}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return nil, fmt.Errorf("erase_pstore: cannot remove %s: %w; the backend may not support erasing (removed so far: %s)", filepath.Join(dir, e.Name()), err, strings.Join(removed, ", "))
		}
		removed = append(removed, e.Name())
	}
	account := fmt.Sprintf("%d pstore records removed from %s", len(removed), dir)
	if len(removed) > 0 {
		account += ": " + strings.Join(removed, ", ")
	}
	return map[string]any{"removed": removed, "summary": account}, nil
}

// propNumber reads a node property given as a number or a string.
func propNumber(props map[string]any, name string) (float64, bool, error) {
	v, ok := props[name]
	if !ok || v == nil || v == "" {
		return 0, false, nil
	}
	switch x := v.(type) {
	case float64:
		return x, true, nil
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, false, fmt.Errorf("node property %s=%q is not a number; fix it (baremetal node set --property %s=N)", name, x, name)
		}
		return f, true, nil
	}
	return 0, false, fmt.Errorf("node property %s has type %T; want a number", name, v)
}

// Verification compares found hardware with the node's properties.
type Verification struct {
	Checked []string `json:"checked"`
	Differs []string `json:"differs,omitempty"`
}

// VerifyProperties checks found against the node properties, each set
// property in turn; memory_mb may differ by tolerance percent.
func VerifyProperties(props map[string]any, found inventory.NodeProperties, tolerance float64) (Verification, error) {
	var v Verification
	num := func(name string, got float64, tol float64) error {
		want, ok, err := propNumber(props, name)
		if err != nil || !ok {
			return err
		}
		v.Checked = append(v.Checked, name)
		if math.Abs(got-want) > want*tol/100 {
			extra := ""
			if tol > 0 {
				extra = fmt.Sprintf(" (more than %g%% apart)", tol)
			}
			v.Differs = append(v.Differs, fmt.Sprintf("%s: node.properties says %g, the node has %g%s", name, want, got, extra))
		}
		return nil
	}
	if err := num("cpus", float64(found.CPUs), 0); err != nil {
		return v, err
	}
	if err := num("memory_mb", float64(found.MemoryMB), tolerance); err != nil {
		return v, err
	}
	if err := num("local_gb", float64(found.LocalGB), 0); err != nil {
		return v, err
	}
	if a, ok := props["cpu_arch"]; ok && a != nil && a != "" {
		want := fmt.Sprint(a)
		v.Checked = append(v.Checked, "cpu_arch")
		if want != found.CPUArch {
			v.Differs = append(v.Differs, fmt.Sprintf("cpu_arch: node.properties says %s, the node has %s", want, found.CPUArch))
		}
	}
	return v, nil
}

func (r *Runner) verifyHardware(ctx context.Context, args map[string]any) (map[string]any, error) {
	props, _ := args[drivers.ArgNodeProperties].(map[string]any)
	tol, err := argNumber(args, drivers.ArgMemoryTolerance, 5)
	if err != nil {
		return nil, err
	}
	if tol > 100 {
		return nil, fmt.Errorf("argument %s=%g: want a percentage of at most 100", drivers.ArgMemoryTolerance, tol)
	}
	hints, err := rootHints(props)
	if err != nil {
		return nil, err
	}
	inv, err := inventory.Collect(ctx, inventory.Options{Logger: r.Log})
	if err != nil {
		return nil, err
	}
	found, err := inventory.PropertiesWithHints(inv, hints)
	if err != nil {
		return nil, err
	}
	v, err := VerifyProperties(props, found, tol)
	if err != nil {
		return nil, err
	}
	if len(v.Checked) == 0 {
		return nil, fmt.Errorf("verify_hardware: the node has none of the properties %s set, so there is nothing to verify; inspect the node or set them", strings.Join(drivers.VerifiedProperties, ", "))
	}
	if len(v.Differs) > 0 {
		return nil, fmt.Errorf("the hardware does not match node.properties: %s", strings.Join(v.Differs, "; "))
	}
	account := fmt.Sprintf("hardware matches node.properties (%s): %d CPUs %s, %d MiB, %d GiB root disk", strings.Join(v.Checked, ", "), found.CPUs, found.CPUArch, found.MemoryMB, found.LocalGB)
	return map[string]any{"verified": v.Checked, "found": asMap(found), "summary": account}, nil
}
