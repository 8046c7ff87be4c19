package raid

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Bootloader is what InstallBootloader did, for the step's result.
type Bootloader struct {
	// RootFS is the image's root file system on the array (/dev/md0p1
	// for a whole-disk image, /dev/md0 for a file system on the array).
	RootFS string `json:"root_filesystem"`
	// Tool is the image's grub-install or grub2-install.
	Tool string `json:"tool"`
	// Target is GRUB's platform, i386-pc (BIOS).
	Target string `json:"target"`
	// Disks are the holder disks that got the boot loader.
	Disks []string `json:"disks"`
	// Config is the grub.cfg grub-mkconfig wrote, inside the image.
	Config string `json:"config"`
	// RdMdUUID lists the rd.md.uuid= parameters added to
	// GRUB_CMDLINE_LINUX for an image with dracut.
	RdMdUUID []string `json:"rd_md_uuid,omitempty"`
}

// grubTarget is the GRUB platform installed: BIOS.
const grubTarget = "i386-pc"

// chrootPath is PATH inside the image, as IPA's (its PATH plus /bin,
// /usr/sbin and /sbin).
const chrootPath = "/usr/sbin:/usr/bin:/sbin:/bin"

// InstallBootloader makes the software RAID array md (the root array
// write_image wrote) bootable as IPA's install_bootloader does for a
// software RAID root in BIOS boot mode: it finds the image's root file
// system on the array (its partitions, md0p1 first, else the array
// itself), mounts it with /dev, /proc, /run bound and /sys, runs the
// image's own grub-install (grub2-install) --target=i386-pc on every
// holder disk of the array, then grub-mkconfig (grub2-mkconfig) -o
// /boot/grub/grub.cfg (/boot/grub2/grub.cfg) as IPA always does there
// (GRUB_DISABLE_OS_PROBER=true, GRUB_SAVEDEFAULT=true, and rd.md.uuid=
// for the arrays in GRUB_CMDLINE_LINUX when the image has dracut), and
// unmounts everything, also on failure. image names the image in errors.
func InstallBootloader(ctx context.Context, md, image string, o Options) (Bootloader, error) {
	var res Bootloader
	if mode := o.bootMode(); mode != "bios" {
		return res, fmt.Errorf("the ramdisk runs in %s boot mode: the boot loader of a software RAID root is installed for BIOS boot only here (UEFI's EFI system partition on each holder is not implemented); boot the node in legacy BIOS mode", mode)
	}
	name := filepath.Base(md)
	sysMD := filepath.Join(o.sysRoot(), "block", name)
	disks, err := holderDisks(o.sysRoot(), sysMD)
	if err != nil {
		return res, err
	}
	if len(disks) == 0 {
		return res, fmt.Errorf("%s has no member disks in %s/slaves: cannot install the boot loader", md, sysMD)
	}
	// The image's partition table is new to the kernel: read it again
	// (IPA restarts the array and rescans it).
	if f, err := os.Open(md); err == nil {
		_ = rereadPartitions(f)
		f.Close()
	}
	if o.LoadModules != nil {
		// crc32c first: ext4 and xfs (libcrc32c) ask the crypto API for
		// it, which would load it through a modprobe the ramdisk lacks.
		for _, m := range []string{"crc32c_generic", "ext4", "xfs"} {
			if err := o.LoadModules(m); err != nil && o.Log != nil {
				o.Log.Warn("file system module not loaded", "module", m, "err", err)
			}
		}
	}
	cands := mdPartitions(sysMD, md)
	if len(cands) == 0 {
		cands = []string{md}
	}
	mnt, err := os.MkdirTemp("", "bm-root-")
	if err != nil {
		return res, err
	}
	defer os.Remove(mnt)
	var tried []string
	for _, c := range cands {
		_ = waitNode(ctx, c)
		fs, err := mountAny(c, mnt)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		if st, err := os.Stat(filepath.Join(mnt, "etc")); err != nil || !st.IsDir() {
			tried = append(tried, fmt.Sprintf("%s (%s): no /etc, not a root file system", c, fs))
			_ = unmount(mnt)
			continue
		}
		res.RootFS = c
		break
	}
	if res.RootFS == "" {
		return res, fmt.Errorf("image %s: no root file system found on %s (tried %s); the image needs an ext4 or xfs root file system, the first partition of a whole-disk image or the whole image",
			image, md, strings.Join(tried, "; "))
	}
	res.Target, res.Disks = grubTarget, disks
	err = installIn(ctx, mnt, md, image, &res, o)
	if uerr := unmount(mnt); uerr != nil && err == nil {
		err = fmt.Errorf("unmount the image's root file system %s: %w", res.RootFS, uerr)
	}
	return res, err
}

// installIn runs the image's GRUB in the root file system mounted at mnt.
func installIn(ctx context.Context, mnt, md, image string, res *Bootloader, o Options) (err error) {
	// Bind mounts for the chroot, unmounted in reverse order even when
	// something fails.
	var mounted []string
	defer func() {
		for i := len(mounted) - 1; i >= 0; i-- {
			if uerr := unmount(mounted[i]); uerr != nil && err == nil {
				err = fmt.Errorf("unmount %s: %w", mounted[i], uerr)
			}
		}
	}()
	for _, b := range []struct{ src, dst, fstype string }{
		{"/dev", "dev", ""}, {"/proc", "proc", ""}, {"/run", "run", ""}, {"none", "sys", "sysfs"},
	} {
		dst := filepath.Join(mnt, b.dst)
		if st, err := os.Lstat(dst); err == nil && !st.IsDir() {
			return fmt.Errorf("image %s: /%s is not a directory", image, b.dst)
		}
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("image %s: make /%s: %w", image, b.dst, err)
		}
		if b.fstype == "" {
			_ = os.MkdirAll(b.src, 0o755)
			err = unix.Mount(b.src, dst, "", unix.MS_BIND, "")
		} else {
			err = unix.Mount(b.src, dst, b.fstype, 0, "")
		}
		if err != nil {
			return fmt.Errorf("mount %s on the image's /%s: %w", b.src, b.dst, err)
		}
		mounted = append(mounted, dst)
	}
	bin := ""
	for _, cand := range []string{"grub2", "grub"} {
		if p := findIn(mnt, cand+"-install"); p != "" {
			bin, res.Tool = cand, p
			break
		}
	}
	if bin == "" {
		return fmt.Errorf("image %s has no grub-install or grub2-install (looked in /usr/sbin, /usr/bin, /sbin and /bin of %s): "+
			"a software RAID root boots with the image's own GRUB2, installed on each holder disk; build the image with GRUB for BIOS "+
			"(Debian/Ubuntu: grub-pc; RHEL-likes: grub2-pc and grub2-tools)", image, res.RootFS)
	}
	if st, err := os.Stat(filepath.Join(mnt, "usr/lib/grub", grubTarget)); err != nil || !st.IsDir() {
		return fmt.Errorf("image %s has %s but no GRUB modules for BIOS (/usr/lib/grub/%s): install them in the image (Debian/Ubuntu: grub-pc-bin; RHEL-likes: grub2-pc-modules)", image, res.Tool, grubTarget)
	}
	mkconfig := findIn(mnt, bin+"-mkconfig")
	if mkconfig == "" {
		return fmt.Errorf("image %s has %s but no %s-mkconfig to write its grub.cfg", image, res.Tool, bin)
	}
	for _, d := range res.Disks {
		if out, err := chroot(ctx, mnt, nil, res.Tool, "--target="+grubTarget, d); err != nil {
			return fmt.Errorf("image %s: %s --target=%s %s failed: %v: %s", image, res.Tool, grubTarget, d, err, out)
		}
		if o.Log != nil {
			o.Log.Info("boot loader installed", "disk", d, "tool", res.Tool, "target", grubTarget)
		}
	}
	// IPA: an image with dracut gets rd.md.uuid= for the arrays, so that
	// its initramfs assembles them.
	if findIn(mnt, "dracut") != "" {
		uuids, err := mdUUIDs(ctx, o)
		if err != nil {
			return err
		}
		res.RdMdUUID = uuids
		if err := addKernelArgs(filepath.Join(mnt, "etc/default/grub"), uuids); err != nil {
			return fmt.Errorf("image %s: %w", image, err)
		}
	}
	res.Config = "/boot/" + bin + "/grub.cfg"
	env := []string{"GRUB_DISABLE_OS_PROBER=true", "GRUB_SAVEDEFAULT=true"}
	if out, err := chroot(ctx, mnt, env, mkconfig, "-o", res.Config); err != nil {
		return fmt.Errorf("image %s: %s -o %s failed: %v: %s", image, mkconfig, res.Config, err, out)
	}
	unix.Sync()
	return nil
}

// findIn finds an executable's path inside the image root (not following
// absolute links outside it: the chroot resolves them).
func findIn(root, name string) string {
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			return p
		}
	}
	return ""
}

// chroot runs path (inside root) with args in root, C locale, PATH as IPA
// sets it; it returns the combined output, its last 4 KiB on failure.
func chroot(ctx context.Context, root string, env []string, path string, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = append([]string{"PATH=" + chrootPath, "LC_ALL=C", "HOME=/root"}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	s := strings.TrimSpace(out.String())
	if len(s) > 4096 {
		s = "..." + s[len(s)-4096:]
	}
	return s, err
}

// mountAny mounts dev at dir trying the root file systems the ramdisk
// carries; it returns the type that mounted.
func mountAny(dev, dir string) (string, error) {
	var errs []string
	for _, fs := range []string{"ext4", "xfs", "btrfs"} {
		if err := unix.Mount(dev, dir, fs, 0, ""); err == nil {
			return fs, nil
		} else {
			errs = append(errs, fs+": "+err.Error())
		}
	}
	return "", errors.New("does not mount (" + strings.Join(errs, ", ") + ")")
}

// unmount unmounts dir, retrying a busy file system for a few seconds.
func unmount(dir string) error {
	var err error
	for i := 0; i < 30; i++ {
		if err = unix.Unmount(dir, 0); err == nil || err == unix.EINVAL {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// mdPartitions lists the partitions of the md device at sysMD (sysfs),
// by number: /dev/md0p1, /dev/md0p2, ...
func mdPartitions(sysMD, md string) []string {
	ents, err := os.ReadDir(sysMD)
	if err != nil {
		return nil
	}
	base := filepath.Base(md)
	type p struct {
		n    int
		path string
	}
	var ps []p
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), base+"p")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(rest)
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(sysMD, e.Name(), "partition")); err != nil {
			continue
		}
		ps = append(ps, p{n, filepath.Join(filepath.Dir(md), e.Name())})
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].n < ps[j].n })
	var out []string
	for _, x := range ps {
		out = append(out, x.path)
	}
	return out
}

// holderDisks are the disks under the members of the md device at sysMD
// (IPA's get_holder_disks): a partition's disk, or the member itself
// when it is a whole disk.
func holderDisks(sysRoot, sysMD string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(sysMD, "slaves"))
	if err != nil {
		return nil, fmt.Errorf("list the members of %s: %w", filepath.Base(sysMD), err)
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range ents {
		dev := e.Name()
		cls := filepath.Join(sysRoot, "class", "block", dev)
		if _, err := os.Stat(filepath.Join(cls, "partition")); err == nil {
			real, err := filepath.EvalSymlinks(cls)
			if err != nil {
				return nil, fmt.Errorf("find the disk of %s: %w", dev, err)
			}
			dev = filepath.Base(filepath.Dir(real))
		}
		if !seen[dev] {
			seen[dev] = true
			out = append(out, "/dev/"+dev)
		}
	}
	sort.Strings(out)
	return out, nil
}

// mdUUIDs are rd.md.uuid= parameters for every array running.
func mdUUIDs(ctx context.Context, o Options) ([]string, error) {
	mds, _ := filepath.Glob(filepath.Join(o.sysRoot(), "block", "md*"))
	sort.Strings(mds)
	var out []string
	for _, m := range mds {
		s, err := o.mdadm(ctx, "--detail", "--export", "/dev/"+filepath.Base(m))
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(s, "\n") {
			if u, ok := strings.CutPrefix(strings.TrimSpace(l), "MD_UUID="); ok {
				out = append(out, "rd.md.uuid="+u)
			}
		}
	}
	return out, nil
}

var grubCmdline = regexp.MustCompile(`(?m)^GRUB_CMDLINE_LINUX="(.*)"`)

// addKernelArgs appends args to GRUB_CMDLINE_LINUX in the image's
// /etc/default/grub, as IPA does for dracut images (a file without the
// setting is left alone, as IPA's substitution leaves it).
func addKernelArgs(path string, args []string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || len(args) == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	out := grubCmdline.ReplaceAllFunc(b, func(m []byte) []byte {
		cur := grubCmdline.FindSubmatch(m)[1]
		return []byte(`GRUB_CMDLINE_LINUX="` + strings.TrimSpace(string(cur)+" "+strings.Join(args, " ")) + `"`)
	})
	return os.WriteFile(path, out, 0o644)
}
