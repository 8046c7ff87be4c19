package main

import (
	"flag"
	"time"

	"github.com/bmedge/bmedge/agent"
)

// netbootFlags declares the flags of agent.NetbootOptions; the returned function
// reads them after parsing.
func netbootFlags(fs *flag.FlagSet) func() agent.NetbootOptions {
	iface := fs.String("netboot-interface", "", "network boot of the ramdisk for nodes without virtual media (ipmi): the site network's interface, where the agent serves DHCP, TFTP and HTTP (docs/netboot.md); off when empty")
	addr := fs.String("netboot-address", "", "network boot: the agent's IPv4 address on --netboot-interface (default: the interface's first)")
	mode := fs.String("netboot-dhcp-mode", "dhcp", "network boot: 'dhcp' (lease --netboot-dhcp-range to the nodes being booted) or 'proxy' (proxy-DHCP beside the site's own DHCP server: boot file only, no address)")
	rng := fs.String("netboot-dhcp-range", "", "network boot, dhcp mode: the addresses leased, FIRST-LAST (e.g. 10.1.0.100-10.1.0.199)")
	router := fs.String("netboot-router", "", "network boot, dhcp mode: the router handed out with a lease")
	dns := fs.String("netboot-dns", "", "network boot, dhcp mode: DNS servers handed out with a lease (comma-separated)")
	lease := fs.Duration("netboot-lease-time", time.Hour, "network boot, dhcp mode: lease time")
	httpPort := fs.Int("netboot-http-port", 8082, "network boot: port of the HTTP server (iPXE script, kernel, initramfs) on --netboot-address")
	ipxeDir := fs.String("netboot-ipxe-dir", "/usr/lib/ipxe", "network boot: folder of the iPXE binaries undionly.kpxe (BIOS) and snponly.efi (UEFI), Debian's ipxe package")
	kernel := fs.String("netboot-kernel", "", "network boot: the ramdisk kernel (make ramdisk: build/ramdisk/vmlinuz)")
	initrd := fs.String("netboot-initrd", "", "network boot: the ramdisk initramfs (make ramdisk: build/ramdisk/initramfs.cpio.zst)")
	params := fs.String("netboot-kernel-params", agent.DefaultNetbootKernelParams, "network boot: kernel parameters before each boot's own (console, panic)")
	return func() agent.NetbootOptions {
		return agent.NetbootOptions{Interface: *iface, Address: *addr, Mode: *mode, Range: *rng, Router: *router, DNS: *dns,
			LeaseTime: *lease, HTTPPort: *httpPort, IPXEDir: *ipxeDir, Kernel: *kernel, Initrd: *initrd, KernelParams: *params}
	}
}
