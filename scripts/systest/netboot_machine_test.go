package systest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	rdboot "github.com/bmedge/bmedge/ramdisk/boot"
)

// The network-booting machine of an ipmi node: ipmi_sim's power-on runs
// the test binary as this machine (netbootMachineEnv set), in the node's
// own network namespace on the site network (a labnet Host, its eth0 the
// node's PXE MAC). With the BMC's boot device pxe it boots as a UEFI
// machine's PXE firmware and then iPXE do, each step with an independent
// client: DHCP as a PXE client of architecture 7 (busybox udhcpc), the
// boot file by TFTP from the DHCP answer's server (curl), DHCP again as
// iPXE (user class "iPXE"), the script whose URL that answer gives
// (curl), then the kernel and initrd the script names (curl, checked
// against the agent's files). The script's kernel command line then
// starts a stand-in ramdisk (lib/session with the standard in-band steps,
// each done at once, as mediaRamdiskMachine's) that talks to the site
// broker the command line names with the boot's credential. From any
// other boot device the machine runs its instance: it does nothing until
// the BMC powers it off (ipmi_sim kills it).

const netbootMachineEnv = "BM_TEST_AS_NETBOOT_MACHINE"

// Environment of the machine: the site network's DHCP client script, the
// files the agent serves (to check what was fetched), the inventory the
// stand-in's inspection reports (JSON).
const (
	netbootMachineScript    = "BM_NETBOOT_MACHINE_UDHCPC_SCRIPT"
	netbootMachineKernel    = "BM_NETBOOT_MACHINE_KERNEL"
	netbootMachineInitrd    = "BM_NETBOOT_MACHINE_INITRD"
	netbootMachineInventory = "BM_NETBOOT_MACHINE_INVENTORY"
)

// asNetbootMachine runs the machine and exits when the environment asks
// for it (called first in TestMain).
func asNetbootMachine() {
	if os.Getenv(netbootMachineEnv) != "1" {
		return
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	boot := os.Getenv("BM_IPMISIM_BOOT")
	if boot != "pxe" {
		log.Info("netboot machine: booting the instance from the disk", "boot_device", boot)
		<-ctx.Done()
		os.Exit(0)
	}
	if err := netbootMachine(ctx, log); err != nil {
		log.Error("netboot machine: the boot failed", "err", err)
		// A firmware whose network boot failed sits at its boot menu.
		<-ctx.Done()
		os.Exit(1)
	}
	os.Exit(0)
}

// netbootMachine is one network boot and the stand-in ramdisk's run.
func netbootMachine(ctx context.Context, log *slog.Logger) error {
	// A fresh start: no address yet.
	if out, err := exec.Command("ip", "addr", "flush", "dev", "eth0").CombinedOutput(); err != nil {
		return fmt.Errorf("ip addr flush: %v: %s", err, out)
	}
	const pxeClass = "PXEClient:Arch:00007:UNDI:003016"
	// Option 93, the client's architecture: 7, EFI x86-64.
	lease, err := udhcpc(ctx, "-V", pxeClass, "-x", "0x5d:0007")
	if err != nil {
		return fmt.Errorf("PXE firmware's DHCP: %w", err)
	}
	log.Info("netboot machine: PXE firmware's lease", "lease", lease)
	if lease["boot_file"] == "" || lease["siaddr"] == "" || lease["ip"] == "" {
		return fmt.Errorf("PXE firmware's DHCP answer has no boot file: %v", lease)
	}
	if out, err := exec.Command("ip", "addr", "add", lease["ip"]+"/"+maskBits(lease["subnet"]), "dev", "eth0").CombinedOutput(); err != nil {
		return fmt.Errorf("ip addr add %s: %v: %s", lease["ip"], err, out)
	}
	nbp, err := curl(ctx, "tftp://"+lease["siaddr"]+"/"+lease["boot_file"])
	if err != nil {
		return fmt.Errorf("PXE firmware's TFTP of %s: %w", lease["boot_file"], err)
	}
	want, _ := os.ReadFile(filepath.Join("/usr/lib/ipxe", lease["boot_file"]))
	if len(nbp) == 0 || !bytes.Equal(nbp, want) {
		return fmt.Errorf("TFTP gave %d bytes for %s, not Debian's iPXE binary (%d bytes)", len(nbp), lease["boot_file"], len(want))
	}
	log.Info("netboot machine: iPXE by TFTP", "file", lease["boot_file"], "bytes", len(nbp))
	// iPXE runs: DHCP again with its user class.
	ipxe, err := udhcpc(ctx, "-V", pxeClass, "-x", "0x5d:0007", "-x", "0x4d:69505845")
	if err != nil {
		return fmt.Errorf("iPXE's DHCP: %w", err)
	}
	scriptURL := ipxe["boot_file"]
	if !strings.HasPrefix(scriptURL, "http://") {
		return fmt.Errorf("iPXE's DHCP answer has no script URL: %v", ipxe)
	}
	script, err := curl(ctx, scriptURL)
	if err != nil {
		return fmt.Errorf("iPXE's script: %w", err)
	}
	var kernelURL, initrdURL, cmdline string
	for _, line := range strings.Split(string(script), "\n") {
		line, _, _ = strings.Cut(line, " || ")
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "kernel":
			kernelURL = f[1]
			cmdline = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(line, "kernel"), " "+f[1]))
		case len(f) >= 4 && f[0] == "initrd" && f[1] == "--name":
			initrdURL = f[3]
		}
	}
	if kernelURL == "" || initrdURL == "" {
		return fmt.Errorf("iPXE's script names no kernel and initrd:\n%s", script)
	}
	for _, f := range []struct{ url, want string }{{kernelURL, os.Getenv(netbootMachineKernel)}, {initrdURL, os.Getenv(netbootMachineInitrd)}} {
		got, err := curl(ctx, f.url)
		if err != nil {
			return fmt.Errorf("iPXE's fetch of %s: %w", f.url, err)
		}
		want, err := os.ReadFile(f.want)
		if err != nil || !bytes.Equal(got, want) {
			return fmt.Errorf("%s gave %d bytes, not the agent's %s (%v)", f.url, len(got), f.want, err)
		}
	}
	p, err := rdboot.ParseCmdline(cmdline)
	if err != nil {
		return fmt.Errorf("the kernel command line %q: %w", cmdline, err)
	}
	log.Info("netboot machine: the kernel runs", "node", p.Node, "broker", p.Broker)
	var inv map[string]any
	if err := json.Unmarshal([]byte(os.Getenv(netbootMachineInventory)), &inv); err != nil {
		return fmt.Errorf("%s: %w", netbootMachineInventory, err)
	}
	return standinSession(ctx, p, inv, log)
}

// udhcpc asks for a lease once (three tries) and returns what the
// answer said (ip, siaddr, boot_file, subnet, router).
func udhcpc(ctx context.Context, extra ...string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	args := append([]string{"udhcpc", "-i", "eth0", "-n", "-q", "-t", "3", "-T", "1", "-s", os.Getenv(netbootMachineScript)}, extra...)
	out, err := exec.CommandContext(ctx, "busybox", args...).CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "LEASE "); ok {
			m := map[string]string{}
			for _, kv := range strings.Fields(rest) {
				if k, v, ok := strings.Cut(kv, "="); ok {
					m[k] = v
				}
			}
			return m, nil
		}
	}
	return nil, fmt.Errorf("no lease (%v):\n%s", err, out)
}

// udhcpcScript is the DHCP client's script: it prints the lease.
const udhcpcScript = "#!/bin/sh\n[ \"$1\" = bound ] && echo \"LEASE ip=$ip siaddr=$siaddr boot_file=$boot_file subnet=$subnet router=$router\"\nexit 0\n"

func maskBits(mask string) string {
	if mask == "" {
		return "24"
	}
	n := 0
	for _, part := range strings.Split(mask, ".") {
		var b int
		fmt.Sscan(part, &b)
		for ; b > 0; b <<= 1 {
			if b&0x80 != 0 {
				n++
			}
			b &= 0x7f
		}
	}
	return fmt.Sprint(n)
}

// curl fetches a URL (tftp:// or http://), at most 64 MiB.
func curl(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "curl", "-sSf", "--max-filesize", "67108864", url)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("curl %s: %v: %s", url, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// netbootMachinePowerOn is ipmi_sim's power-on command for the machine:
// the test binary in the node's namespace (nsenter, as the labnet Host's
// commands run).
func netbootMachinePowerOn(nsenter []string, env map[string]string) string {
	var b strings.Builder
	for _, a := range nsenter {
		b.WriteString(shellWord(a) + " ")
	}
	b.WriteString("env")
	for k, v := range env {
		b.WriteString(" " + shellWord(k+"="+v))
	}
	exe, _ := os.Executable()
	b.WriteString(" " + netbootMachineEnv + "=1 " + shellWord(exe))
	return "exec " + b.String()
}

func shellWord(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
