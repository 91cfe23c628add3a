#!/usr/bin/env bash
# image.sh [OUTDIR] -- build the test bed's Debian 12 guest image (qcow2).
#
# Writes (default OUTDIR: ${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/images, outside the repo):
#   OUTDIR/$NAME.qcow2          GPT disk: p1 = FAT ESP holding a unified kernel image at
#                               \EFI\BOOT\BOOTX64.EFI (UEFI/OVMF boot), p2 = ext4 root
#   OUTDIR/$NAME.qcow2.sha256   `sha256sum` line of the qcow2 (a BaseImage's expected digest)
#   OUTDIR/$NAME.inputs         the recorded build inputs (script digest + parameters)
#   OUTDIR/$NAME.info           sizes and build time
#   OUTDIR/$NAME.{vmlinuz,initrd.img,cmdline}   for direct-kernel boot (SeaBIOS)
# Guest: Debian $SUITE, linux-image-cloud-amd64, systemd + networkd DHCP on en*/eth*,
# cloud-init (datasource NoCloud, locale C.UTF-8), qemu-guest-agent (udev-activated), squid
# installed but DISABLED (a seed's vendor-data enables it). No loop devices, no mounts:
# mmdebstrap + mkfs.ext4 -d + mtools + sgdisk + dd + qemu-img.
#
# Idempotent: skips when the qcow2 exists, its .sha256 matches and the recorded inputs equal
# the current ones (this script's digest, SUITE, PKGS, mirrors, sizes, UUIDs, cmdline).
# FORCE=1 rebuilds. Needs root and the Debian mirror (mmdebstrap fetches the guest's packages),
# so it runs in the root namespace; its host tools come from cluster/packages/install.sh.
# Env: NAME (debian-12-testbed), SUITE (bookworm), MIRROR, SECMIRROR, PKGS, ESP_MB (40),
#      ROOT_FREE_MB (160), CMDLINE, FORCE, KEEP_BUILD=1 (keep OUTDIR/.build-$NAME).
set -euo pipefail

NAME=${NAME:-debian-12-testbed}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECMIRROR=${SECMIRROR:-http://deb.debian.org/debian-security}
ESP_MB=${ESP_MB:-40}
ROOT_FREE_MB=${ROOT_FREE_MB:-160}
ROOT_UUID=${ROOT_UUID:-6b1e6a2c-3f0e-4d7a-9a1c-0c0ffee0b001}
ROOT_PARTUUID=${ROOT_PARTUUID:-6b1e6a2c-3f0e-4d7a-9a1c-0c0ffee0b002}
ESP_PARTUUID=${ESP_PARTUUID:-6b1e6a2c-3f0e-4d7a-9a1c-0c0ffee0b003}
DISK_GUID=${DISK_GUID:-6b1e6a2c-3f0e-4d7a-9a1c-0c0ffee0b004}
CMDLINE=${CMDLINE:-"root=UUID=$ROOT_UUID ro console=tty0 console=ttyS0,115200n8 quiet"}
PKGS=${PKGS:-linux-image-cloud-amd64,initramfs-tools,zstd,systemd,systemd-sysv,udev,dbus,netbase,iproute2,cloud-init,cloud-guest-utils,fdisk,qemu-guest-agent,squid,procps,less}

# ------------------------------------------------------------------ chroot customisation
# mmdebstrap calls this script back as `image.sh __customize ROOTDIR`.
if [ "${1:-}" = "__customize" ]; then
  R=$2
  echo "UUID=$ROOT_UUID / ext4 errors=remount-ro 0 1" > "$R/etc/fstab"
  echo debian > "$R/etc/hostname"
  mkdir -p "$R/etc/systemd/network"
  cat > "$R/etc/systemd/network/80-testbed-dhcp.network" <<'EOF'
# fallback DHCP (cloud-init's own 10-cloud-init-*.network wins when it writes one)
[Match]
Name=en* eth*
[Network]
DHCP=ipv4
[DHCPv4]
ClientIdentifier=mac
EOF
  cat > "$R/etc/cloud/cloud.cfg.d/90-testbed.cfg" <<'EOF'
datasource_list: [ NoCloud, None ]
system_info:
  network:
    renderers: [ networkd ]
# en_US.UTF-8 (cloud-init's Debian default) is not generated in this image
locale: C.UTF-8
EOF
  echo LANG=C.UTF-8 > "$R/etc/default/locale"
  chroot "$R" systemctl enable systemd-networkd.service
  chroot "$R" systemctl disable squid.service || true        # the seed's vendor-data enables it
  chroot "$R" systemctl mask systemd-networkd-wait-online.service || true
  # small initramfs: only what boots a virtio / virtio-scsi root
  mkdir -p "$R/etc/initramfs-tools/conf.d"
  printf 'MODULES=list\nCOMPRESS=zstd\n' > "$R/etc/initramfs-tools/conf.d/testbed.conf"
  printf '%s\n' virtio_pci virtio_blk virtio_scsi sd_mod sr_mod virtio_net virtio_console \
    >> "$R/etc/initramfs-tools/modules"
  chroot "$R" update-initramfs -u -k all
  : > "$R/etc/machine-id"; rm -f "$R/var/lib/dbus/machine-id"
  # mmdebstrap leaves the BUILD HOST's resolv.conf in the tree: never ship it.
  rm -f "$R/etc/resolv.conf"
  rm -rf "$R"/var/cache/apt/archives/*.deb "$R"/var/cache/apt/*.bin "$R"/var/lib/apt/lists/* \
         "$R"/var/cache/debconf/*-old "$R"/var/log/*.log "$R"/var/log/apt/* "$R"/tmp/* "$R"/var/tmp/*
  # keep __pycache__: without .pyc files cloud-init byte-compiles on first boot (slow under TCG)
  exit 0
fi

log() { echo "image.sh: $*"; }
[ "$(id -u)" = 0 ] || { echo "image.sh: must run as root (mmdebstrap --mode=root)" >&2; exit 1; }

OUTDIR=${1:-${OUTDIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/images}}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
IMG=$OUTDIR/$NAME.qcow2
SUM=$IMG.sha256
INPUTS=$OUTDIR/$NAME.inputs
SELF=$(readlink -f "$0")

# One build at a time per OUTDIR.
exec 9>"$OUTDIR/.$NAME.lock"
flock 9

want_inputs() {
  cat <<EOF
script_sha256=$(sha256sum "$SELF" | cut -d' ' -f1)
name=$NAME
suite=$SUITE
mirror=$MIRROR
secmirror=$SECMIRROR
pkgs=$PKGS
esp_mb=$ESP_MB
root_free_mb=$ROOT_FREE_MB
root_uuid=$ROOT_UUID
root_partuuid=$ROOT_PARTUUID
esp_partuuid=$ESP_PARTUUID
disk_guid=$DISK_GUID
cmdline=$CMDLINE
EOF
}

if [ "${FORCE:-0}" != 1 ] && [ -s "$IMG" ] && [ -s "$SUM" ] && [ -s "$INPUTS" ]; then
  if [ "$(want_inputs)" = "$(cat "$INPUTS")" ] && (cd "$OUTDIR" && sha256sum --quiet -c "$SUM" >/dev/null 2>&1); then
    log "$IMG is up to date ($(cut -d' ' -f1 "$SUM")), skipping (FORCE=1 rebuilds)"
    exit 0
  fi
  log "$IMG exists but its inputs or digest changed: rebuilding"
fi

# ------------------------------------------------------------------ host dependencies
# mmdebstrap, systemd-boot-efi, mtools, ... come from the one install step (make packages).
"$(dirname "$(readlink -f "$0")")/../packages/install.sh" --check
STUB=/usr/lib/systemd/boot/efi/linuxx64.efi.stub

B=$OUTDIR/.build-$NAME
rm -rf "$B"; mkdir -p "$B"
cleanup() { [ "${KEEP_BUILD:-0}" = 1 ] || rm -rf "$B"; rm -f "$IMG.tmp"; }
trap cleanup EXIT
T0=$(date +%s)
step() { log "[$(( $(date +%s) - T0 ))s] $*"; }

step "mmdebstrap $SUITE (minbase + $(echo "$PKGS" | tr ',' ' ' | wc -w) packages)"
mmdebstrap --mode=root --variant=minbase --include="$PKGS" --quiet \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --customize-hook="ROOT_UUID=$ROOT_UUID '$SELF' __customize \"\$1\"" \
  "$SUITE" "$B/root" \
  "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb $SECMIRROR $SUITE-security main"

# ------------------------------------------------------------------ kernel artefacts
KVER=$(find "$B/root/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -1)
cp "$B/root/boot/vmlinuz-$KVER" "$B/vmlinuz"
cp "$B/root/boot/initrd.img-$KVER" "$B/initrd.img"
printf '%s' "$CMDLINE" > "$B/cmdline"
rm -f "$B/root/boot/vmlinuz-$KVER" "$B/root/boot/initrd.img-$KVER"   # the ESP carries the UKI

step "unified kernel image (systemd-boot stub + objcopy), kernel $KVER"
align=4096
end=0
while read -r _ name size vma _rest; do
  case "$name" in .*) e=$(( 0x$vma + 0x$size )); [ $e -gt $end ] && end=$e ;; esac
done < <(objdump -h "$STUB" | awk 'NF==7')
up() { echo $(( ($1 + align - 1) / align * align )); }
osrel=$(up $end)
cmdl=$(up $(( osrel + $(stat -Lc%s "$B/root/usr/lib/os-release") )))
linux=$(up $(( cmdl + $(stat -Lc%s "$B/cmdline") )))
initrd=$(up $(( linux + $(stat -Lc%s "$B/vmlinuz") )))
objcopy \
  --add-section .osrel="$B/root/usr/lib/os-release" --change-section-vma .osrel="$(printf 0x%x "$osrel")" \
  --add-section .cmdline="$B/cmdline"               --change-section-vma .cmdline="$(printf 0x%x "$cmdl")" \
  --add-section .linux="$B/vmlinuz"                 --change-section-vma .linux="$(printf 0x%x "$linux")" \
  --add-section .initrd="$B/initrd.img"             --change-section-vma .initrd="$(printf 0x%x "$initrd")" \
  "$STUB" "$B/BOOTX64.EFI"

step "ESP ${ESP_MB} MiB (mkfs.vfat + mtools)"
mkfs.vfat -n ESP -C "$B/esp.img" $((ESP_MB * 1024)) >/dev/null
mmd -i "$B/esp.img" ::/EFI ::/EFI/BOOT
mcopy -i "$B/esp.img" "$B/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI

used_mb=$(du -sm "$B/root" | cut -f1)
ROOT_MB=$(( used_mb * 115 / 100 + ROOT_FREE_MB ))
step "root ext4 ${ROOT_MB} MiB (mkfs.ext4 -d, ${used_mb} MiB used)"
mkfs.ext4 -q -F -L root -U "$ROOT_UUID" -m 0 -E root_owner=0:0 -d "$B/root" "$B/root.img" "${ROOT_MB}M"

step "GPT disk (sgdisk + dd)"
TOTAL_MB=$(( 1 + ESP_MB + ROOT_MB + 1 ))
truncate -s "${TOTAL_MB}M" "$B/disk.raw"
sgdisk -U "$DISK_GUID" \
  -n "1:1M:+${ESP_MB}M" -t 1:ef00 -c 1:ESP  -u 1:"$ESP_PARTUUID" \
  -n 2:0:0            -t 2:8304 -c 2:root -u 2:"$ROOT_PARTUUID" "$B/disk.raw" >/dev/null
dd if="$B/esp.img"  of="$B/disk.raw" bs=1M seek=1 conv=notrunc,sparse status=none
dd if="$B/root.img" of="$B/disk.raw" bs=1M seek=$((1 + ESP_MB)) conv=notrunc,sparse status=none
sgdisk -v "$B/disk.raw" >/dev/null

step "compressed qcow2"
qemu-img convert -c -O qcow2 "$B/disk.raw" "$IMG.tmp"
rm -f "$SUM" "$INPUTS"          # never leave a digest that describes another image
mv "$IMG.tmp" "$IMG"
(cd "$OUTDIR" && sha256sum "$NAME.qcow2" > "$SUM.tmp" && mv "$SUM.tmp" "$SUM")
cp "$B/vmlinuz" "$OUTDIR/$NAME.vmlinuz"
cp "$B/initrd.img" "$OUTDIR/$NAME.initrd.img"
cp "$B/cmdline" "$OUTDIR/$NAME.cmdline"
T1=$(date +%s)
{
  echo "built=$(date -u +%FT%TZ) seconds=$((T1 - T0)) kernel=$KVER suite=$SUITE"
  echo "rootfs_used_mb=$used_mb root_part_mb=$ROOT_MB esp_mb=$ESP_MB virtual_mb=$TOTAL_MB"
  echo "qcow2_bytes=$(stat -c%s "$IMG") uki_bytes=$(stat -c%s "$B/BOOTX64.EFI") initrd_bytes=$(stat -c%s "$B/initrd.img")"
  echo "sha256=$(cut -d' ' -f1 "$SUM")"
} > "$OUTDIR/$NAME.info"
want_inputs > "$INPUTS"
sed 's/^/image.sh: /' "$OUTDIR/$NAME.info"
log "wrote $IMG ($(( $(stat -c%s "$IMG") / 1048576 )) MiB) in $((T1 - T0)) s"
