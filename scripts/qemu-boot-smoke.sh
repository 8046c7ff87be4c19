#!/usr/bin/env bash
# Boots OUTDIR's kernel and initramfs (from scripts/build-ramdisk.sh) in
# QEMU and checks that the ramdisk agent gets ready on the serial console.
#
#   scripts/qemu-boot-smoke.sh [OUTDIR]      (default build/ramdisk)
#
# TCG emulation, 1 GiB, a 64 MiB virtio disk with serial DISK0, virtio-rng,
# user-mode networking on virtio-net (QEMU listens on no address), static
# guest address 10.0.2.15/24. Exits 0 when the line
# "bmramdisk: ready node=test ip=10.0.2.15/24" shows up within TIMEOUT
# seconds (default 120) and the agent then powers the VM off.
# Environment: TIMEOUT, SMOKE_APPEND (extra kernel parameters),
# SMOKE_EXPECT_POWEROFF=0 (do not require the power-off), KEEP_LOG=1.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/ramdisk}
TIMEOUT=${TIMEOUT:-120}
EXPECT_POWEROFF=${SMOKE_EXPECT_POWEROFF:-1}

die() { printf 'qemu-boot-smoke: FAIL: %s\n' "$*" >&2; exit 1; }
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 missing (scripts/build-ramdisk.sh installs it)"
KERNEL=$OUT/vmlinuz
INITRD=$OUT/initramfs.cpio.zst
[ -f "$INITRD" ] || INITRD=$OUT/initramfs.cpio.xz
[ -f "$INITRD" ] || INITRD=$OUT/initramfs.cpio.gz
[ -f "$KERNEL" ] && [ -f "$INITRD" ] || die "no $OUT/vmlinuz and initramfs.cpio.{zst,xz,gz}: run scripts/build-ramdisk.sh $OUT"

TMP=$(mktemp -d /tmp/qemu-smoke.XXXXXX)
LOG=$TMP/serial.log
QPID=
cleanup() {
  if [ -n "$QPID" ] && kill -0 "$QPID" 2>/dev/null; then kill "$QPID" 2>/dev/null || true; wait "$QPID" 2>/dev/null || true; fi
  if [ "${KEEP_LOG:-0}" = 1 ] || [ "${FAILED:-1}" = 1 ]; then
    cp "$LOG" "$OUT/smoke-serial.log" 2>/dev/null && echo "serial log: $OUT/smoke-serial.log"
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
truncate -s 64M "$TMP/disk.raw"

ACCEL=tcg
APPEND="console=ttyS0 panic=1 bm.node=test bm.ip=10.0.2.15/24 ${SMOKE_APPEND:-}"
START=$(date +%s.%N)
qemu-system-x86_64 \
  -accel "$ACCEL" -m 1024 -smp 1 -nographic -no-reboot \
  -drive "file=$TMP/disk.raw,format=raw,if=none,id=d0" -device virtio-blk-pci,drive=d0,serial=DISK0 \
  -device virtio-rng-pci \
  -netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
  -kernel "$KERNEL" -initrd "$INITRD" -append "$APPEND" \
  </dev/null >"$LOG" 2>&1 &
QPID=$!

READY=
while :; do
  NOW=$(date +%s.%N)
  if grep -q 'bmramdisk: ready node=test ip=10.0.2.15/24' "$LOG" 2>/dev/null; then
    READY=$NOW
    break
  fi
  if grep -q 'bmramdisk: FATAL' "$LOG" 2>/dev/null; then break; fi
  if ! kill -0 "$QPID" 2>/dev/null; then break; fi
  if awk -v a="$START" -v b="$NOW" -v t="$TIMEOUT" 'BEGIN { exit !(b - a > t) }'; then break; fi
  sleep 0.2
done

if [ -z "$READY" ]; then
  tail -n 40 "$LOG" >&2 || true
  die "no ready line within ${TIMEOUT}s"
fi
WALL=$(awk -v a="$START" -v b="$READY" 'BEGIN { printf "%.1f", b - a }')
# The agent stamps its lines with the seconds since the kernel started.
UPTIME=$(grep 'bmramdisk: ready ' "$LOG" | head -n1 | sed -n 's/.*\[ *\([0-9.]*\)\] bmramdisk: ready.*/\1/p')
grep 'bmramdisk: ready ' "$LOG" | head -n1

if [ "$EXPECT_POWEROFF" = 1 ]; then
  for _ in $(seq 1 $((TIMEOUT * 5))); do
    kill -0 "$QPID" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$QPID" 2>/dev/null; then
    tail -n 20 "$LOG" >&2
    die "the VM did not power off after the ready line"
  fi
  wait "$QPID" || true
  QPID=
  grep -q 'reboot: Power down' "$LOG" || die "QEMU exited without the kernel's power-down message"
fi
FAILED=0
echo "qemu-boot-smoke: OK: boot-to-ready ${WALL}s wall clock (QEMU start to ready line), ${UPTIME:-?}s kernel uptime; $(basename "$INITRD") $(stat -c %s "$INITRD") bytes"
