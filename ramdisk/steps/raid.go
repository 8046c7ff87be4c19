package steps

import (
	"context"
	"fmt"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/ramdisk/disk"
	"github.com/bmedge/bmedge/ramdisk/image"
	"github.com/bmedge/bmedge/ramdisk/raid"
	"github.com/u-root/u-root/pkg/kmodule"
)

// raidOptions are the software RAID options of the live ramdisk: mdadm
// from PATH, the md modules loaded from /lib/modules.
func (r *Runner) raidOptions() raid.Options {
	bin := "mdadm"
	if _, err := os.Stat("/sbin/mdadm"); err == nil {
		bin = "/sbin/mdadm"
	}
	// mdadm keeps its map of arrays in /run/mdadm.
	_ = os.MkdirAll("/run/mdadm", 0o700)
	return raid.Options{Log: r.Log, Mdadm: bin, LoadModules: func(names ...string) error {
		prober, err := kmodule.NewProber(kmodule.ProbeOpts{})
		if err != nil {
			return err
		}
		for _, m := range names {
			if err := prober.Probe(m, ""); err != nil && !strings.Contains(err.Error(), "exists") {
				return fmt.Errorf("module %s: %w", m, err)
			}
		}
		return nil
	}}
}

// rootDevice is write_image's target: without root device hints, the
// software RAID root volume when the disks hold one (as IPA writes to
// the root array), else the disk image.SelectRoot picks.
func (r *Runner) rootDevice(ctx context.Context, devs []disk.Device, hints image.RootDeviceHints) (disk.Device, error) {
	if hints.IsZero() {
		md, found, err := raid.Root(ctx, erasable(devs), r.raidOptions())
		if err != nil {
			return disk.Device{}, err
		}
		if found {
			return disk.FromPath(md, "")
		}
	}
	return image.SelectRoot(devs, hints)
}

func (r *Runner) raidCreate(ctx context.Context, args map[string]any) (map[string]any, error) {
	cfg, err := raid.Parse(args[drivers.ArgTargetRaidConfig])
	if err != nil {
		return nil, err
	}
	return r.raidBuild(ctx, cfg, args)
}

// raidApply is raid.apply_configuration: raid_config from the argument,
// the existing arrays deleted first unless delete_existing is false.
func (r *Runner) raidApply(ctx context.Context, args map[string]any) (map[string]any, error) {
	rc, ok := args[drivers.ArgRaidConfig]
	if !ok {
		return nil, fmt.Errorf("raid.apply_configuration needs the raid_config argument: {\"logical_disks\": [...]} in target_raid_config's schema")
	}
	cfg, err := raid.Parse(rc)
	if err != nil {
		return nil, fmt.Errorf("raid_config: %w", err)
	}
	del, err := argBool(args, drivers.ArgDeleteExisting, true)
	if err != nil {
		return nil, err
	}
	var deleted string
	if del {
		out, err := r.raidDelete(ctx)
		if err != nil {
			return nil, err
		}
		deleted, _ = out["summary"].(string)
	}
	out, err := r.raidBuild(ctx, cfg, args)
	if err != nil {
		return nil, err
	}
	if del {
		out["summary"] = "deleted: " + deleted + "; created: " + out["summary"].(string)
	}
	return out, nil
}

func (r *Runner) raidBuild(ctx context.Context, cfg raid.Config, args map[string]any) (map[string]any, error) {
	root, err := argBool(args, drivers.ArgRaidCreateRoot, true)
	if err != nil {
		return nil, err
	}
	nonroot, err := argBool(args, drivers.ArgRaidCreateNonroot, true)
	if err != nil {
		return nil, err
	}
	devs, err := r.devices()
	if err != nil {
		return nil, err
	}
	made, err := raid.Create(ctx, cfg, erasable(devs), root, nonroot, r.raidOptions())
	if err != nil {
		return nil, err
	}
	var parts []string
	for _, a := range made.Arrays {
		parts = append(parts, fmt.Sprintf("%s (%s, RAID-%s, %d bytes) on %s", a.Device, a.VolumeName, a.RaidLevel, a.SizeBytes, strings.Join(a.Members, " ")))
	}
	if len(made.BIOSBoot) > 0 {
		parts = append(parts, "BIOS boot partitions (for the boot loader write_image installs on each holder) "+strings.Join(made.BIOSBoot, " "))
	}
	return map[string]any{"raid_config": made.RaidConfig, "arrays": made.Arrays, "bios_boot_partitions": made.BIOSBoot, "summary": summary(parts, "no array")}, nil
}

func (r *Runner) raidDelete(ctx context.Context) (map[string]any, error) {
	res, err := raid.Delete(ctx, func() ([]disk.Device, error) {
		devs, err := r.devices()
		return erasable(devs), err
	}, func(d disk.Device) error {
		_, err := disk.EraseMetadata(ctx, d, r.Erase)
		return err
	}, r.raidOptions())
	if err != nil {
		return nil, err
	}
	var parts []string
	for _, a := range res.Stopped {
		parts = append(parts, fmt.Sprintf("%s stopped", a.Device))
	}
	if len(res.Zeroed) > 0 {
		parts = append(parts, "superblocks zeroed on "+strings.Join(res.Zeroed, " "))
	}
	if len(res.Wiped) > 0 {
		parts = append(parts, "partition tables zeroed on "+strings.Join(res.Wiped, " "))
	}
	return map[string]any{"raid_config": map[string]any{}, "deleted": asMap(res), "summary": summary(parts, "no software RAID found")}, nil
}

// raidBootloader installs the boot loader on every holder disk when
// write_image wrote to a software RAID array (IPA's install_bootloader
// for an md root device), and says so in the step's result.
func (r *Runner) raidBootloader(ctx context.Context, url string, dev disk.Device, out map[string]any) error {
	if st, err := os.Stat(filepath.Join("/sys/block", filepath.Base(dev.Path), "md")); err != nil || !st.IsDir() {
		return nil
	}
	bl, err := raid.InstallBootloader(ctx, dev.Path, imageName(url), r.raidOptions())
	if err != nil {
		return err
	}
	out["bootloader"] = asMap(bl)
	s, _ := out["summary"].(string)
	out["summary"] = fmt.Sprintf("%s; boot loader installed on %s (%s --target=%s from the image's %s, %s written)", s, strings.Join(bl.Disks, " "), bl.Tool, bl.Target, bl.RootFS, bl.Config)
	return nil
}

// imageName is image_source for messages: without user information and
// query (a temporary URL's signature).
func imageName(src string) string {
	u, err := neturl.Parse(src)
	if err != nil {
		return "(unparsable image_source)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
