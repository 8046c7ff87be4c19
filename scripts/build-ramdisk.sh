#!/usr/bin/env bash
# Builds the in-band ramdisk: a Debian kernel (OUTDIR/vmlinuz) and a u-root
# initramfs with the bmramdisk agent as uinit (OUTDIR/initramfs.cpio.zst),
# and a bootable ISO holding both (OUTDIR/bmramdisk.iso: BIOS and UEFI,
# with Secure Boot on or off, CD or USB stick) with a generic kernel
# command line, for boots through a BMC's virtual media: it carries
# nothing node-specific, each boot's parameters come on a second medium
# (lib/bootmedia). For UEFI network boot with Secure Boot, Debian's
# signed shim and network GRUB: OUTDIR/shimx64.efi and OUTDIR/grubx64.efi.
#
#   scripts/build-ramdisk.sh [OUTDIR]        (default build/ramdisk)
#
# Works from scratch on Debian 12: installs its Debian packages if missing,
# downloads the kernel package, the signed boot loaders (shim-signed,
# grub-efi-amd64-signed) and the u-root builder once into
# OUTDIR/cache and OUTDIR/tools. Reproducible: the same inputs give the same
# bytes, and after the first run it also works with GOPROXY=off.
# Environment: RAMDISK_EXTRA_MODULES="igb ixgbe" adds kernel modules;
# RAMDISK_COMPRESS=xz or gzip makes a .cpio.xz or .cpio.gz instead of the
# .cpio.zst. zstd by default: the kernel unpacks it three times as fast as
# xz (1.2 s against 4.0 s under QEMU's TCG, 10 % more bytes).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:-build/ramdisk}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
CACHE=$OUT/cache
TOOLS=$OUT/tools
UROOT_VERSION=v0.16.0
AGENT=github.com/bmedge/bmedge/ramdisk/cmd/bmramdisk
MAX_BYTES=$((16 * 1024 * 1024))
mkdir -p "$CACHE" "$TOOLS"

exec 9>"$OUT/.lock"
flock 9 # one build per OUTDIR at a time

T0=$(date +%s)
log() { printf '[build-ramdisk %3ds] %s\n' "$(($(date +%s) - T0))" "$*"; }
die() { printf 'build-ramdisk: error: %s\n' "$*" >&2; exit 1; }

SUDO=
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: cannot install packages"
  SUDO=sudo
fi

# --- Debian packages -------------------------------------------------------
APT_UPDATED=
apt_update() {
  if [ -z "$APT_UPDATED" ]; then
    log "apt-get update"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    APT_UPDATED=1
  fi
}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
# grub-pc-bin, grub-efi-amd64-bin, mtools and xorriso make the ISO;
# qemu-system-x86, ipxe-qemu and ovmf (UEFI firmware) are for the tests.
PKGS="kmod cpio xz-utils zstd gzip qemu-system-x86 ipxe-qemu util-linux grub-pc-bin grub-efi-amd64-bin mtools xorriso ovmf"
missing=()
for p in $PKGS; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt_update
  log "apt-get install ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}" >/dev/null
fi
command -v go >/dev/null || die "the Go toolchain (go) is not on PATH"
DEPMOD=$(command -v depmod || echo /usr/sbin/depmod)
MODPROBE=$(command -v modprobe || echo /usr/sbin/modprobe)

# --- kernel ------------------------------------------------------------------
kernel_pkg() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9].*-amd64$/ { print $2; exit }'
}
KPKG=$(kernel_pkg || true)
if [ -z "$KPKG" ]; then
  apt_update
  KPKG=$(kernel_pkg || true)
fi
[ -n "$KPKG" ] || die "cannot resolve the package that linux-image-amd64 depends on"
DEB=$(ls "$CACHE/${KPKG}"_*_amd64.deb 2>/dev/null | sort -V | tail -n1 || true)
if [ -z "$DEB" ]; then
  log "apt-get download $KPKG"
  dl() { (cd "$CACHE" && apt-get download -q -o APT::Sandbox::User=root "$KPKG" >/dev/null); }
  dl || { apt_update; dl; } || die "apt-get download $KPKG failed"
  DEB=$(ls "$CACHE/${KPKG}"_*_amd64.deb | sort -V | tail -n1)
fi
KROOT=$CACHE/kernel-$(basename "$DEB" .deb)
if [ ! -e "$KROOT/.done" ]; then
  log "unpacking $(basename "$DEB")"
  rm -rf "$KROOT"
  dpkg -x "$DEB" "$KROOT"
  touch "$KROOT/.done"
fi
KVER=$(ls "$KROOT/lib/modules" | head -n1)
[ -n "$KVER" ] && [ -f "$KROOT/boot/vmlinuz-$KVER" ] || die "no kernel in $DEB"
if [ ! -s "$KROOT/lib/modules/$KVER/modules.dep" ]; then
  log "depmod $KVER"
  "$DEPMOD" -b "$KROOT" "$KVER"
fi
install -m 0644 "$KROOT/boot/vmlinuz-$KVER" "$OUT/vmlinuz.tmp"
mv "$OUT/vmlinuz.tmp" "$OUT/vmlinuz"
# The same kernel uncompressed (OUTDIR/vmlinux, an ELF with its PVH entry
# point): what the qemu-dev development driver boots directly (QEMU's
# -kernel), because under TCG a bzImage spends ~5 CPU-seconds
# decompressing itself. Servers, network boot and the ISO keep Debian's
# signed vmlinuz. Debian compresses the kernel with xz: the payload is the
# xz stream that starts at its magic bytes.
if [ ! -s "$OUT/vmlinux" ] || [ "$OUT/vmlinux" -ot "$OUT/vmlinuz" ]; then
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$OUT/vmlinuz" | head -n1 | cut -d: -f1)
  [ -n "$off" ] || die "$OUT/vmlinuz holds no xz stream: cannot make vmlinux"
  # (xz stops at the stream's end, and tail may then die of SIGPIPE)
  { tail -c +$((off + 1)) "$OUT/vmlinuz" || true; } | xz -dc --single-stream >"$OUT/vmlinux.tmp" ||
    die "cannot decompress the kernel in $OUT/vmlinuz"
  [ "$(head -c 4 "$OUT/vmlinux.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] || die "the kernel in $OUT/vmlinuz is not an ELF"
  mv "$OUT/vmlinux.tmp" "$OUT/vmlinux"
fi

# --- module subset -----------------------------------------------------------
STAGE=$OUT/stage
MODDIR=$STAGE/lib/modules/$KVER
rm -rf "$STAGE"
mkdir -p "$MODDIR"
WANT=$(grep -v '^#' ramdisk/build/modules.txt | xargs echo ${RAMDISK_EXTRA_MODULES:-})
nmods=0
for m in $WANT; do
  # modprobe resolves modules.dep: one "insmod PATH" line per module and
  # dependency, "builtin NAME" for what is built into the kernel.
  deps=$("$MODPROBE" -d "$KROOT" -S "$KVER" --show-depends "$m" 2>&1) ||
    die "kernel $KVER has no module $m: $deps"
  while read -r kind path _; do
    [ "$kind" = insmod ] || continue
    rel=${path#"$KROOT/lib/modules/$KVER/"}
    if [ ! -e "$MODDIR/$rel" ]; then
      install -D -m 0644 "$path" "$MODDIR/$rel"
      nmods=$((nmods + 1))
    fi
  done <<<"$deps"
done
for f in modules.builtin modules.builtin.modinfo modules.order; do
  [ -f "$KROOT/lib/modules/$KVER/$f" ] && cp "$KROOT/lib/modules/$KVER/$f" "$MODDIR/"
done
"$DEPMOD" -b "$STAGE" "$KVER"
# Keep the text indexes the agent reads (modules.dep, modules.alias,
# modules.builtin); the binary ones are for kmod, which is not in the image.
rm -f "$MODDIR"/*.bin "$MODDIR/modules.builtin.modinfo"
find "$STAGE" -exec touch -h -d @0 {} +
log "kernel $KVER: $nmods modules ($(du -sk "$MODDIR" | cut -f1) KiB) for: $WANT"

# --- mdadm -------------------------------------------------------------------
# Software RAID (raid.create_configuration) runs Debian's mdadm: its
# package's binary, with the shared libraries it links (from this host's
# libc6 and libudev1, the same Debian release) and the dynamic loader.
MDEB=$(ls "$CACHE"/mdadm_*_amd64.deb 2>/dev/null | sort -V | tail -n1 || true)
if [ -z "$MDEB" ]; then
  log "apt-get download mdadm"
  mdl() { (cd "$CACHE" && apt-get download -q -o APT::Sandbox::User=root mdadm >/dev/null); }
  mdl || { apt_update; mdl; } || die "apt-get download mdadm failed"
  MDEB=$(ls "$CACHE"/mdadm_*_amd64.deb | sort -V | tail -n1)
fi
MROOT=$CACHE/$(basename "$MDEB" .deb)
[ -x "$MROOT/sbin/mdadm" ] || { rm -rf "$MROOT"; dpkg -x "$MDEB" "$MROOT"; }
install -D -m 0755 "$MROOT/sbin/mdadm" "$STAGE/sbin/mdadm"
for lib in $(ldd "$MROOT/sbin/mdadm" | awk '$2 == "=>" { print $3 } $1 ~ /^\// { print $1 }'); do
  real=$(readlink -f "$lib")
  install -D -m 0755 "$real" "$STAGE$lib" # the loader must be executable
done
find "$STAGE" -exec touch -h -d @0 {} +
log "mdadm: $(basename "$MDEB") with $(ldd "$MROOT/sbin/mdadm" | grep -c '/')" libraries

# --- Secure Boot chain -------------------------------------------------------
# Debian's signed boot loaders: shim (signed by Microsoft's UEFI CA, so a
# firmware with Microsoft's keys runs it; it holds Debian's certificate)
# and GRUB's monolithic images (signed by Debian; no modules to load). The
# kernel above is Debian's signed one, which shim's certificate verifies.
# Downloaded like the kernel: nothing is installed on this host.
sb_deb() { # PACKAGE -> the unpacked folder
  local d
  d=$(ls "$CACHE/$1"_*_amd64.deb 2>/dev/null | sort -V | tail -n1 || true)
  if [ -z "$d" ]; then
    log "apt-get download $1" >&2
    sdl() { (cd "$CACHE" && apt-get download -q -o APT::Sandbox::User=root "$1" >/dev/null); }
    sdl "$1" || { apt_update; sdl "$1"; } || die "apt-get download $1 failed"
    d=$(ls "$CACHE/$1"_*_amd64.deb | sort -V | tail -n1)
  fi
  local r=$CACHE/$(basename "$d" .deb)
  [ -e "$r/.done" ] || { rm -rf "$r"; dpkg -x "$d" "$r" && touch "$r/.done"; }
  echo "$r"
}
SHIMROOT=$(sb_deb shim-signed)
GRUBSROOT=$(sb_deb grub-efi-amd64-signed)
SHIM=$SHIMROOT/usr/lib/shim/shimx64.efi.signed
GRUB_CD=$GRUBSROOT/usr/lib/grub/x86_64-efi-signed/gcdx64.efi.signed
GRUB_NET=$GRUBSROOT/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed
for f in "$SHIM" "$GRUB_CD" "$GRUB_NET"; do [ -s "$f" ] || die "no $f in Debian's package"; done
# For network boot (agent/netboot): shim, then GRUB under the name shim
# loads from the same TFTP server.
install -m 0644 "$SHIM" "$OUT/shimx64.efi"
install -m 0644 "$GRUB_NET" "$OUT/grubx64.efi"
log "Secure Boot chain: $(basename "$SHIMROOT"), $(basename "$GRUBSROOT")"

# --- u-root ------------------------------------------------------------------
export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0}
case " ${GOFLAGS:-} " in *" -buildvcs="*) ;; *) export GOFLAGS="${GOFLAGS:+$GOFLAGS }-buildvcs=false" ;; esac
if [ ! -x "$TOOLS/u-root" ] || [ "$(cat "$TOOLS/u-root.version" 2>/dev/null)" != "$UROOT_VERSION" ]; then
  log "go install github.com/u-root/u-root@$UROOT_VERSION"
  proxy=$(go env GOPROXY)
  if [ "$proxy" = off ]; then
    # "go install m@v" asks the proxy about deprecations even when the
    # module is cached; offline, let the module cache serve as the proxy.
    proxy="file://$(go env GOMODCACHE)/cache/download"
  fi
  (cd / && GOOS= GOARCH= GOPROXY="$proxy" GOBIN="$TOOLS" go install -trimpath "github.com/u-root/u-root@$UROOT_VERSION")
  echo "$UROOT_VERSION" >"$TOOLS/u-root.version"
fi
mapfile -t CMDS < <(grep -v '^#' ramdisk/build/commands.txt | grep .)
# The commands must resolve from the module's go.mod (pinned as tools).
# Only stdout names unresolved packages: on a cold module cache go prints
# "go: downloading ..." on stderr, which is progress, not an error.
if ! go list -e -f '{{if .Error}}{{.ImportPath}}: {{.Error}}{{end}}' "${CMDS[@]}" "$AGENT" >"$OUT/golist.err" 2>"$OUT/golist.log"; then
  cat "$OUT/golist.log" >&2
  die "go list failed for the u-root commands and the agent"
fi
if [ -s "$OUT/golist.err" ]; then
  cat "$OUT/golist.err" >&2
  die "u-root commands or the agent do not resolve; pin them with: go get -tool PKG@$UROOT_VERSION"
fi
rm -f "$OUT/golist.err" "$OUT/golist.log"

log "u-root: ${#CMDS[@]} commands + bmramdisk (uinit)"
CPIO=$OUT/initramfs.cpio
# u-root finds go through GOROOT (a -trimpath build of it has none compiled in).
GOROOT=$(go env GOROOT) PATH="$(go env GOROOT)/bin:$PATH" "$TOOLS/u-root" -o "$CPIO.tmp" \
  -uinitcmd=bmramdisk -defaultsh=gosh \
  -skip-ldd -files "$STAGE/lib:lib" -files "$STAGE/lib64:lib64" -files "$STAGE/sbin/mdadm:sbin/mdadm" \
  "${CMDS[@]}" "$AGENT" 2>"$OUT/u-root.log" || { cat "$OUT/u-root.log" >&2; die "u-root failed"; }
mv "$CPIO.tmp" "$CPIO"

case ${RAMDISK_COMPRESS:-zstd} in
  zstd)
    IMG=$OUT/initramfs.cpio.zst
    # -T1: same bytes every time.
    zstd -19 -T1 -q -f -c "$CPIO" >"$IMG.tmp" ;;
  xz)
    IMG=$OUT/initramfs.cpio.xz
    # crc32: the kernel's xz decoder knows no other check; -T1: same bytes every time.
    xz --check=crc32 -9 -T1 -c "$CPIO" >"$IMG.tmp" ;;
  gzip)
    IMG=$OUT/initramfs.cpio.gz
    gzip -9 -n -c "$CPIO" >"$IMG.tmp" ;;
  *) die "RAMDISK_COMPRESS must be zstd, xz or gzip" ;;
esac
mv "$IMG.tmp" "$IMG"

# --- ISO ---------------------------------------------------------------------
# BIOS: GRUB (El Torito, plus an MBR for a USB stick), put together by hand
# rather than by grub-mkrescue, whose ISO is not reproducible (it stamps
# the build time into the ISO and its FAT image); the modules it needs are
# built into its core image. UEFI: an EFI system partition image with
# Debian's signed chain, so that the ISO boots with Secure Boot on as well
# as off: EFI/BOOT/BOOTX64.EFI is shim, which loads grubx64.efi beside it
# (Debian's signed GRUB for CDs, gcdx64.efi), which verifies the signed
# kernel through shim. That GRUB has its prefix at /boot/grub of the medium
# it started from (a CD: the ISO itself) or else of the volume holding
# /.disk/info (a USB stick: it starts on the FAT image), and reads
# /boot/grub/grub.cfg, the BIOS one. GRUB boots the kernel with a generic
# command line: the serial console last, so that the agent's log lands on
# the serial console a BMC records; loglevel=4 as the qemu-dev driver boots
# it; panic=1 for the crash-only agent.
ISO=$OUT/bmramdisk.iso
ISO_CMDLINE="console=tty0 console=ttyS0,115200 panic=1 loglevel=4"
GRUB_LIB=/usr/lib/grub
ISOSTAGE=$OUT/iso-stage
rm -rf "$ISOSTAGE"
mkdir -p "$ISOSTAGE/tree/boot/bmramdisk" "$ISOSTAGE/tree/boot/grub" "$ISOSTAGE/tree/.disk"
cp "$OUT/vmlinuz" "$ISOSTAGE/tree/boot/bmramdisk/vmlinuz"
cp "$IMG" "$ISOSTAGE/tree/boot/bmramdisk/$(basename "$IMG")"
echo "bmedge ramdisk" >"$ISOSTAGE/tree/.disk/info"
printf '%s\n' 'search --no-floppy --set=root --file /boot/bmramdisk/vmlinuz' 'set prefix=($root)/boot/grub' >"$ISOSTAGE/early.cfg"
{
  echo "# bmedge ramdisk: nothing node-specific here; the agent reads its"
  echo "# parameters from the boot parameters medium (volume BMPARAMS)."
  echo "serial --unit=0 --speed=115200"
  echo "terminal_input console serial"
  echo "terminal_output console serial"
  echo "set timeout=0"
  echo "set default=0"
  echo "menuentry 'bmedge ramdisk' {"
  echo "  linux /boot/bmramdisk/vmlinuz $ISO_CMDLINE"
  echo "  initrd /boot/bmramdisk/$(basename "$IMG")"
  echo "}"
  echo "menuentry 'bmedge ramdisk (a shell instead of a reboot on a fatal error)' {"
  echo "  linux /boot/bmramdisk/vmlinuz $ISO_CMDLINE bm.debug"
  echo "  initrd /boot/bmramdisk/$(basename "$IMG")"
  echo "}"
} >"$ISOSTAGE/tree/boot/grub/grub.cfg"
GRUB_MODS="iso9660 part_msdos part_gpt normal linux search search_fs_file configfile serial terminal echo test"
# shellcheck disable=SC2086 # GRUB_MODS is a list
grub-mkimage -O i386-pc-eltorito -d "$GRUB_LIB/i386-pc" -p /boot/grub -c "$ISOSTAGE/early.cfg" \
  -o "$ISOSTAGE/tree/boot/grub/bios.img" biosdisk $GRUB_MODS
# The EFI system partition: an 8 MiB FAT image (256 tracks, 2 heads, 32
# sectors) with EFI/BOOT/BOOTX64.EFI and grubx64.efi. mtools takes its
# timestamps from SOURCE_DATE_EPOCH (FAT cannot hold a date before 1980);
# the volume serial number is fixed.
FAT_EPOCH=$((SOURCE_DATE_EPOCH < 315619200 ? 315619200 : SOURCE_DATE_EPOCH))
EFIIMG=$ISOSTAGE/tree/boot/grub/efi.img
SOURCE_DATE_EPOCH=$FAT_EPOCH mformat -C -t 256 -h 2 -s 32 -N 626d6564 -v BMEFI -i "$EFIIMG" ::
SOURCE_DATE_EPOCH=$FAT_EPOCH mmd -i "$EFIIMG" ::/EFI ::/EFI/BOOT
SOURCE_DATE_EPOCH=$FAT_EPOCH mcopy -i "$EFIIMG" "$SHIM" ::/EFI/BOOT/BOOTX64.EFI
SOURCE_DATE_EPOCH=$FAT_EPOCH mcopy -i "$EFIIMG" "$GRUB_CD" ::/EFI/BOOT/grubx64.efi
# xorriso honours SOURCE_DATE_EPOCH (the volume dates, and every file's
# date set to its mtime): the same inputs give the same ISO bytes.
find "$ISOSTAGE/tree" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
xorriso -as mkisofs -o "$ISO.tmp" -V BMRAMDISK -r \
  -b boot/grub/bios.img -no-emul-boot -boot-load-size 4 -boot-info-table --grub2-boot-info \
  --grub2-mbr "$GRUB_LIB/i386-pc/boot_hybrid.img" \
  --efi-boot boot/grub/efi.img -efi-boot-part --efi-boot-image --protective-msdos-label \
  "$ISOSTAGE/tree" >"$OUT/xorriso.log" 2>&1 || { cat "$OUT/xorriso.log" >&2; die "xorriso failed"; }
mv "$ISO.tmp" "$ISO"
rm -rf "$ISOSTAGE" "$OUT/xorriso.log"

size() { stat -c %s "$1"; }
human() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
(cd "$OUT" && sha256sum vmlinuz vmlinux "$(basename "$IMG")" bmramdisk.iso shimx64.efi grubx64.efi >SHA256SUMS)
log "done in $(($(date +%s) - T0)) s"
# Paths inside the repository are shown relative to it.
show() { case "$1" in "$ROOT"/*) echo "${1#"$ROOT"/}" ;; *) echo "$1" ;; esac; }
echo "kernel:     $(show "$OUT/vmlinuz") ($KVER, $(size "$OUT/vmlinuz") bytes, $(human "$(size "$OUT/vmlinuz")"))"
echo "vmlinux:    $(show "$OUT/vmlinux") (the kernel uncompressed, for the qemu-dev driver's direct boot; $(human "$(size "$OUT/vmlinux")"))"
echo "cpio:       $(show "$CPIO") ($(size "$CPIO") bytes, $(human "$(size "$CPIO")"))"
echo "initramfs:  $(show "$IMG") ($(size "$IMG") bytes, $(human "$(size "$IMG")"))"
echo "iso:        $(show "$ISO") ($(size "$ISO") bytes, $(human "$(size "$ISO")"); BIOS and UEFI with Secure Boot; $ISO_CMDLINE)"
echo "netboot:    $(show "$OUT/shimx64.efi") and grubx64.efi (Debian's signed shim and network GRUB, for UEFI network boot with Secure Boot)"
[ "$(size "$IMG")" -le "$MAX_BYTES" ] || die "the compressed initramfs is larger than 16 MiB"
