#!/usr/bin/env bash
# What one boot of the ramdisk costs under QEMU (TCG), per way of booting
# it: CPU-seconds (user + system) of qemu-system-x86_64 from its start to
# the ramdisk's power-off, and the guest's uptime at the agent's "ready".
# Direct kernel boot as the qemu-dev driver does it (-m 512, one vCPU,
# virtio NIC, disk and RNG); with no bm.broker the ramdisk powers off once
# ready. Run it on a quiet machine: a loaded one makes every boot dearer.
#
#   scripts/qemu-boot-cost.sh [OUTDIR] [RUNS]     (build/ramdisk, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/ramdisk}
RUNS=${2:-3}
command -v qemu-system-x86_64 >/dev/null || { echo "qemu-system-x86_64 missing (make ramdisk installs it)" >&2; exit 1; }
[ -s "$OUT/vmlinuz" ] && [ -s "$OUT/initramfs.cpio.zst" ] || { echo "no ramdisk in $OUT: make ramdisk" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
truncate -s 64M "$TMP/disk.raw"
variants=("vmlinuz initramfs.cpio.zst" "vmlinux initramfs.cpio.zst")
[ -s "$OUT/initramfs.cpio.xz" ] && variants=("vmlinuz initramfs.cpio.xz" "${variants[@]}")
printf '%-34s %s\n' "kernel initramfs" "CPU-seconds per boot (each run) | guest uptime at ready, s"
for v in "${variants[@]}"; do
  read -r k i <<<"$v"
  [ -s "$OUT/$k" ] && [ -s "$OUT/$i" ] || continue
  cpus=() readys=()
  for _ in $(seq "$RUNS"); do
    /usr/bin/env time -f '%U %S' -o "$TMP/time" timeout 300 qemu-system-x86_64 -m 512 -smp 1 -nographic -no-reboot \
      -kernel "$OUT/$k" -initrd "$OUT/$i" -append 'console=ttyS0 panic=1 loglevel=4 bm.node=x bm.site=lab' \
      -device virtio-rng-pci -nic user,model=virtio-net-pci,restrict=on \
      -drive "file=$TMP/disk.raw,format=raw,if=virtio" >"$TMP/console" 2>&1 || true
    cpus+=("$(awk '{ printf "%.1f", $1 + $2 }' "$TMP/time")")
    readys+=("$(tr -d '\r' <"$TMP/console" | sed -n 's/.*\[ *\([0-9.]*\)\] bmramdisk: ready .*/\1/p' | head -n1)")
  done
  printf '%-34s %s | %s\n' "$k $i" "${cpus[*]}" "${readys[*]:-none}"
done
