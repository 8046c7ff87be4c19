// Package steps is the ramdisk's in-band step runner: it offers the steps
// this hardware supports and runs them with ramdisk/disk, ramdisk/image and
// ramdisk/inventory, reporting progress. It is the Runner of a
// lib/session; it must never speak the protocol itself.
package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/drivers"
	liblldp "github.com/bmedge/bmedge/lib/lldp"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/ramdisk/bmcaddr"
	"github.com/bmedge/bmedge/ramdisk/burnin"
	"github.com/bmedge/bmedge/ramdisk/disk"
	"github.com/bmedge/bmedge/ramdisk/image"
	"github.com/bmedge/bmedge/ramdisk/inventory"
	"github.com/bmedge/bmedge/ramdisk/lldp"
)

// Runner runs in-band steps on the local hardware.
type Runner struct {
	Log *slog.Logger
	// List lists block devices; nil means disk.List with the defaults.
	List func() ([]disk.Device, error)
	// Erase tunes erasure (tests inject openers; the zero value is real).
	Erase disk.EraseOptions
	// Rescue starts the operator's login for finalize_rescue with the
	// SHA-crypt hash of the rescue password; nil: this ramdisk has none.
	Rescue func(hash string) (map[string]any, error)
	// LLDP listens for LLDP frames on the named NICs during inspection;
	// nil is ramdisk/lldp's Listen for its default time.
	LLDP func(ctx context.Context, names []string) map[string]lldp.Result
}

func (r *Runner) devices() ([]disk.Device, error) {
	if r.List != nil {
		return r.List()
	}
	return disk.List(disk.ListOptions{})
}

// erasable is the devices erase steps act on: not protected (read-only,
// virtual media, removable, the boot parameters medium).
func erasable(devs []disk.Device) []disk.Device {
	var out []disk.Device
	for _, d := range devs {
		if d.Protected() == "" {
			out = append(out, d)
		}
	}
	return out
}

// Steps implements session.Runner: erase steps and burnin_disk only when
// there is a disk to erase, write_image only when there is a disk to
// write; the manual steps that need no disk always.
func (r *Runner) Steps() (clean, deploy []protocol.Step) {
	clean = []protocol.Step{{Interface: "deploy", Step: "inspect_hardware", Priority: 0, Abortable: true}}
	for _, name := range []string{"verify_hardware", "burnin_cpu", "burnin_memory", "burnin_network", "erase_pstore"} {
		clean = append(clean, protocol.Step{Interface: "deploy", Step: name, Priority: 0, Abortable: true})
	}
	devs, err := r.devices()
	if err != nil {
		r.Log.Warn("cannot list block devices; offering no disk steps", "err", err)
		return clean, nil
	}
	if len(erasable(devs)) > 0 {
		clean = append(clean,
			protocol.Step{Interface: "deploy", Step: "erase_devices_metadata", Priority: 99, Abortable: true},
			protocol.Step{Interface: "deploy", Step: "erase_devices", Priority: 10, Abortable: true},
			protocol.Step{Interface: "deploy", Step: "erase_devices_express", Priority: 0, Abortable: true},
			protocol.Step{Interface: "deploy", Step: "burnin_disk", Priority: 0, Abortable: true},
			protocol.Step{Interface: "raid", Step: "create_configuration", Priority: 0},
			protocol.Step{Interface: "raid", Step: "delete_configuration", Priority: 0},
			protocol.Step{Interface: "raid", Step: "apply_configuration", Priority: 0})
		deploy = []protocol.Step{{Interface: "deploy", Step: "write_image", Priority: 80},
			{Interface: "raid", Step: "apply_configuration", Priority: 0}}
	}
	return clean, deploy
}

// Run implements session.Runner.
func (r *Runner) Run(ctx context.Context, step protocol.Step, progress func(float64, string)) (map[string]any, error) {
	switch step.Interface + "." + step.Step {
	case "deploy.inspect_hardware":
		return r.inspect(ctx, step.Args)
	case "deploy.erase_devices_metadata":
		return r.eraseMetadata(ctx, progress)
	case "deploy.erase_devices":
		return r.eraseDevices(ctx, step.Args, progress)
	case "deploy.erase_devices_express":
		return r.eraseExpress(ctx, step.Args)
	case "deploy.erase_pstore":
		return r.erasePstore(ctx)
	case "deploy.burnin_cpu":
		return r.burninCPU(ctx, step.Args, progress)
	case "deploy.burnin_memory":
		return r.burninMemory(ctx, step.Args, progress)
	case "deploy.burnin_disk":
		return r.burninDisk(ctx, step.Args, progress)
	case "deploy.burnin_network":
		res, account, err := burnin.NetworkStep(ctx, step.Args, progress, "")
		r.Log.Info("network burn-in", "result", account)
		return res, err
	case "deploy.verify_hardware":
		return r.verifyHardware(ctx, step.Args)
	case "raid.create_configuration":
		return r.raidCreate(ctx, step.Args)
	case "raid.delete_configuration":
		return r.raidDelete(ctx)
	case "raid.apply_configuration":
		return r.raidApply(ctx, step.Args)
	case "deploy.write_image":
		return r.writeImage(ctx, step.Args, progress)
	case "rescue.finalize_rescue":
		return r.finalizeRescue(step.Args)
	}
	return nil, fmt.Errorf("this ramdisk has no step %s.%s", step.Interface, step.Step)
}

// finalizeRescue starts the rescue login with the hashed password, as
// Ironic sends it: {"rescue_password": HASH, "hashed": true}. A clear
// password is refused: the coordinator only ever holds the hash.
func (r *Runner) finalizeRescue(args map[string]any) (map[string]any, error) {
	hash, _ := args["rescue_password"].(string)
	if hashed, _ := args["hashed"].(bool); !hashed || hash == "" {
		return nil, errors.New("finalize_rescue needs the SHA-crypt hash of the rescue password with hashed=true; this ramdisk takes no clear password")
	}
	if r.Rescue == nil {
		return nil, errors.New("this ramdisk has no rescue login")
	}
	return r.Rescue(hash)
}

// asMap turns a result struct into the JSON object the wire carries.
func asMap(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func (r *Runner) inspect(ctx context.Context, args map[string]any) (map[string]any, error) {
	hints, err := rootHints(args)
	if err != nil {
		return nil, err
	}
	inv, err := inventory.Collect(ctx, inventory.Options{Logger: r.Log})
	if err != nil {
		return nil, err
	}
	r.listenLLDP(ctx, &inv)
	switch a, err := bmcaddr.Read(ctx, 3*time.Second); {
	case err == nil:
		inv.BMCAddress = a
	case !errors.Is(err, bmcaddr.ErrNoBMC):
		inv.Warnings = append(inv.Warnings, "BMC address not read: "+err.Error())
	}
	props, err := inventory.PropertiesWithHints(inv, hints)
	if err != nil {
		return nil, err
	}
	p := asMap(props)
	delete(p, "root_disk")
	return map[string]any{"inventory": asMap(inv), "properties": p}, nil
}

func (r *Runner) eraseMetadata(ctx context.Context, progress func(float64, string)) (map[string]any, error) {
	devs, err := r.devices()
	if err != nil {
		return nil, err
	}
	devs = erasable(devs)
	var all []disk.MetadataResult
	for i, d := range devs {
		res, err := disk.EraseMetadata(ctx, d, r.Erase)
		if err != nil {
			return nil, fmt.Errorf("erase metadata of %s: %w", d.Path, err)
		}
		all = append(all, res...)
		progress(float64(i+1)/float64(len(devs)), d.Path)
	}
	var parts []string
	for _, x := range all {
		if x.Skipped {
			parts = append(parts, fmt.Sprintf("%s skipped (%s)", x.Path, x.SkipReason))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d regions zeroed", x.Path, len(x.Regions)))
	}
	return map[string]any{"devices": all, "summary": summary(parts, "no disk")}, nil
}

// summary joins per-device accounts for the node's history.
func summary(parts []string, none string) string {
	if len(parts) == 0 {
		return none
	}
	return strings.Join(parts, "; ")
}

func (r *Runner) eraseDevices(ctx context.Context, args map[string]any, progress func(float64, string)) (map[string]any, error) {
	devs, err := r.devices()
	if err != nil {
		return nil, err
	}
	devs, skipped, err := protectedPolicy(devs, args, "erase_devices")
	if err != nil {
		return nil, err
	}
	cont, err := argBool(args, drivers.ArgContinueIfSecureEraseFail, false)
	if err != nil {
		return nil, err
	}
	hw, err := r.hardwareErasers(args)
	if err != nil {
		return nil, err
	}
	var total uint64
	for _, d := range devs {
		total += d.SizeBytes
	}
	var mu sync.Mutex
	done := map[string]uint64{}
	opts := r.Erase
	opts.Hardware, opts.ContinueIfHardwareFails = hw, cont
	opts.Progress = func(p disk.Progress) {
		mu.Lock()
		done[p.Device] = p.Done
		var sum uint64
		for _, v := range done {
			sum += v
		}
		mu.Unlock()
		if total > 0 {
			progress(float64(sum)/float64(total), p.Device)
		}
	}
	res, err := disk.EraseAll(ctx, devs, opts)
	if err != nil {
		return nil, err
	}
	parts := skippedParts(skipped)
	for _, x := range res {
		r.Log.Info("erased", "device", x.Device, "method", x.Method, "bytes", x.Bytes, "took", x.Duration, "verified_samples", x.VerifiedSamples, "skipped", x.SkipReason)
		if x.Skipped {
			parts = append(parts, fmt.Sprintf("%s skipped (%s)", x.Device, x.SkipReason))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s, %d bytes in %.1fs, %d samples verified", x.Device, x.Method, x.Bytes, x.Duration.Seconds(), x.VerifiedSamples))
	}
	return map[string]any{"devices": res, "summary": summary(parts, "no disk")}, nil
}

func (r *Runner) writeImage(ctx context.Context, args map[string]any, progress func(float64, string)) (map[string]any, error) {
	w := protocol.WriteImageArgsOf(args)
	url := w.ImageSource
	if url == "" {
		return nil, fmt.Errorf("write_image needs instance_info/image_source")
	}
	sum, algo := w.Checksum()
	hints, err := rootHints(args)
	if err != nil {
		return nil, err
	}
	devs, err := r.devices()
	if err != nil {
		return nil, err
	}
	dev, err := r.rootDevice(ctx, devs, hints)
	if err != nil {
		return nil, err
	}
	format := w.DiskFormat
	allowMD5 := w.AllowMD5Checksum // the coordinator's --allow-md5-checksum
	res, err := image.Write(ctx, image.Source{URL: url}, dev, image.Options{Checksum: sum, ChecksumAlgo: algo, DiskFormat: format, ProcRoot: r.Erase.ProcRoot,
		AllowMD5Checksum: allowMD5,
		Progress: func(p image.Progress) {
			if p.DownloadTotal > 0 {
				progress(float64(p.Downloaded)/float64(p.DownloadTotal), dev.Path)
			}
		}})
	if err != nil {
		return nil, err
	}
	kind := res.Compression
	if res.Format == image.FormatQcow2 {
		kind = image.FormatQcow2
	}
	account := fmt.Sprintf("%d bytes (%s, %d downloaded) written to %s in %.1fs", res.Written, kind, res.Downloaded, res.Device, res.Duration.Seconds())
	if res.ChecksumAlgo != "" {
		account += ", " + res.ChecksumAlgo + " verified"
	}
	out := map[string]any{"image": asMap(res), "summary": account}
	if err := r.writeConfigDrive(ctx, args, dev, out); err != nil {
		return nil, err
	}
	if err := r.raidBootloader(ctx, url, dev, out); err != nil {
		return nil, err
	}
	return out, nil
}

// rootHints reads Ironic's root_device hints from a step's args.
func rootHints(args map[string]any) (image.RootDeviceHints, error) {
	var hints image.RootDeviceHints
	rd, ok := args["root_device"]
	if !ok || rd == nil {
		return hints, nil
	}
	b, _ := json.Marshal(rd)
	if err := json.Unmarshal(b, &hints); err != nil {
		return hints, fmt.Errorf("root_device hints %s: %w", b, err)
	}
	return hints, nil
}

// listenLLDP records in inv the LLDP frame each physical NIC with a
// link hears (the switch port it is on), as Ironic Python Agent's
// collect_lldp; what could not be listened to is a warning of the
// inventory. The ramdisk brought every NIC up at boot, so one without
// carrier is cabled to nothing that could send.
func (r *Runner) listenLLDP(ctx context.Context, inv *inventory.Inventory) {
	var names []string
	for _, i := range inv.Interfaces {
		if !i.Virtual && i.HasCarrier {
			names = append(names, i.Name)
		}
	}
	if len(names) == 0 {
		return
	}
	listen := r.LLDP
	if listen == nil {
		listen = func(ctx context.Context, names []string) map[string]lldp.Result {
			return lldp.Listen(ctx, names, 0)
		}
	}
	heard := listen(ctx, names)
	for k := range inv.Interfaces {
		i := &inv.Interfaces[k]
		res, ok := heard[i.Name]
		if !ok {
			continue
		}
		if res.TLVs != nil {
			i.LLDP = liblldp.Raw(res.TLVs)
		} else if res.Err != nil {
			inv.Warnings = append(inv.Warnings, "LLDP: "+res.Err.Error())
		}
	}
}
