#!/usr/bin/env bash
# Installs the Debian packages the tests need (make test runs this first):
#   python3-ironicclient  the `baremetal` CLI (coordinator/api/baremetal_cli_test.go)
#   mosquitto             an external MQTT broker for the broker tests
#   mosquitto-clients     mosquitto_pub / mosquitto_sub
#   python3-websocket     an independent WebSocket client for the node console (scripts/systest/console_test.go);
#                         run with /usr/bin/python3
#   curl                  an independent HTTP client for the API's TLS and request checks
#   python3-sushy         OpenStack's Redfish client, an independent check of the virtual Redfish BMC
#                         (drivers/redfish/vbmc); run with /usr/bin/python3
#   openipmi              ipmi_sim, a real IPMI BMC for the IPMI driver's tests (drivers/ipmi)
#   ipmitool              an independent IPMI client, to check what the IPMI driver did
#   xorriso               xorriso/osirrox, an independent ISO9660 reader, to check the boot
#                         parameters medium (lib/bootmedia)
#   ipxe                  Debian's iPXE binaries (undionly.kpxe, snponly.efi) that the edge agent's
#                         network boot serves by TFTP (agent/netboot, docs/netboot.md)
#   ipxe-qemu ovmf qemu-system-x86
#                         QEMU VMs that boot by PXE on the network boot tests' site network
#                         (UEFI firmware, NIC ROMs); make ramdisk installs them too
#   qemu-utils            qemu-img, which makes the qcow2 images the ramdisk's image writer is tested with
#                         (ramdisk/image, ramdisk/steps, scripts/systest/ramdisk/e2e_test.go)
#   busybox               udhcpc, an independent DHCP client for the network boot tests
#   ndisc6                rdisc6, an independent IPv6 router solicitation client for the network
#                         boot's router advertisements to iPXE (agent/netboot/netns_test.go)
#   iproute2 util-linux   ip (bridges, taps, veths) and nsenter for those tests' network namespaces
#   apache2-utils         htpasswd, whose `-B` entries (bcrypt cost 5) the coordinator must refuse
#                         and whose `-B -C 12` entries it must accept (coordinator/api/guessing_test.go)
#   prometheus            promtool, which checks the coordinator's and the edge agent's /metrics
#                         output (scripts/systest/metrics_test.go); its server is not run
#   systemd               systemd-analyze, which checks the shipped units (scripts/systemd/units_test.go)
#   chromium chromium-driver
#                         headless Chromium driven through chromedriver (W3C WebDriver on loopback)
#                         by the web view's browser test (coordinator/ui/browser_test.go)
# Idempotent and non-interactive; a quick no-op when everything is there.
# It never leaves a service running: the tests start their own mosquitto on
# a random loopback port, so the system one that Debian's package would
# start on port 1883 is forbidden during the install and disabled after;
# so is the Prometheus server (port 9090), of which only promtool is used,
# and lldpd, which the LLDP test starts in its own network namespace.
set -euo pipefail

PACKAGES=(python3-ironicclient mosquitto mosquitto-clients python3-websocket curl python3-sushy openipmi ipmitool xorriso prometheus
	apache2-utils ipxe ipxe-qemu ovmf qemu-system-x86 qemu-utils busybox ndisc6 iproute2 util-linux chromium chromium-driver systemd)
# cloud-init: its own config drive reader (read_config_drive) checks the config drives the ramdisk writes
PACKAGES+=(cloud-init)
# fdisk: sfdisk, an independent partition table reader for the config drive tests
PACKAGES+=(fdisk)
# sshpass, openssh-client: OpenSSH's client logs in to the rescue ramdisk (ramdisk/rescue, scripts/systest/ramdisk/rescue_e2e_test.go) and to make run's simulated rescue login (lib/rescuessh, agent/sim, coordinator/cli/readme_test.go)
PACKAGES+=(sshpass openssh-client)
# lldpd: sends LLDP in a network namespace to the ramdisk's LLDP listener (ramdisk/lldp); its service is never left running
PACKAGES+=(lldpd)
# mdadm: reads the software RAID members on the disk files of a QEMU node (scripts/systest/ramdisk/raid_e2e_test.go)
PACKAGES+=(mdadm)
# grub-pc-bin, grub2-common, e2fsprogs: GRUB for BIOS, grub-install and mke2fs make the bootable image deployed onto software RAID (scripts/systest/ramdisk/raid_e2e_test.go)
PACKAGES+=(grub-pc-bin grub2-common e2fsprogs)
# grub-efi-amd64-bin, mtools: with grub-pc-bin and xorriso, grub-mkrescue builds the edge agent's boot ISO of a ramdisk deploy's kernel and ramdisk (agent/sitecache/bootiso.go)
PACKAGES+=(grub-efi-amd64-bin mtools)
# stress-ng: keeps both cores busy while timing-sensitive tests are checked on a loaded machine (docs/benchmarks.md)
PACKAGES+=(stress-ng)

installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

missing=()
for p in "${PACKAGES[@]}"; do
	installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo -n)
	else
		echo "install-test-deps: missing ${missing[*]}; run as root or install them with apt-get" >&2
		exit 1
	fi
fi

echo "install-test-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive

# Forbid service starts while installing (invoke-rc.d honours policy-rc.d),
# unless the machine already has its own policy.
policy=/usr/sbin/policy-rc.d
ours=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\n# installed by bmedge scripts/install-test-deps.sh for the duration of an install\nexit 101\n' |
		"${SUDO[@]}" tee "$policy" >/dev/null
	"${SUDO[@]}" chmod 755 "$policy"
	ours=1
fi
cleanup() {
	if [ "$ours" = 1 ]; then "${SUDO[@]}" rm -f "$policy"; fi
}
trap cleanup EXIT

# Another install running on the machine (an unattended upgrade, a second
# checkout's make test) holds dpkg's lock: wait for it rather than fail.
lock=(-o DPkg::Lock::Timeout=900)
"${SUDO[@]}" apt-get "${lock[@]}" update -qq
"${SUDO[@]}" apt-get "${lock[@]}" install -y -qq --no-install-recommends \
	-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"

# Should the broker or the Prometheus server we just installed have started
# anyway (a machine with its own policy-rc.d), stop it and keep it from
# starting at boot.
for svc in mosquitto prometheus lldpd; do
	if [[ " ${missing[*]} " == *" $svc "* ]]; then
		if command -v systemctl >/dev/null 2>&1; then
			"${SUDO[@]}" systemctl disable --now "$svc" >/dev/null 2>&1 || true
		fi
		if [ -x "/etc/init.d/$svc" ]; then
			"${SUDO[@]}" "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
		fi
	fi
done

for p in "${PACKAGES[@]}"; do
	if ! installed "$p"; then
		echo "install-test-deps: $p is still not installed" >&2
		exit 1
	fi
done
echo "install-test-deps: done"
