#!/usr/bin/env bash
# stock-image.sh [OUTDIR] -- a Debian 12 guest image WITHOUT squid and qemu-guest-agent (as a
# stock genericcloud image has neither), and a local apt repository of what it lacks, for the
# test bed's stock-image boot (test/stockimage): the Proxy's cloud-config must install both from
# a mirror the guest reaches on the bed's network, never from outside.
#
# Writes (default OUTDIR as image.sh's):
#   OUTDIR/$NAME.qcow2 (+ .sha256, .inputs, .info, ...)   image.sh with PKGS minus REPO_PKGS
#   OUTDIR/$NAME.repo/             a flat apt repository: the .deb files apt in that image
#                                  installs for REPO_PKGS (their dependency closure, Recommends
#                                  included), Packages, Packages.gz, Release (unsigned: the
#                                  guest's sources say [trusted=yes], a test-bed-only choice)
#   OUTDIR/$NAME.repo/image.sha256 the image the repository was made for
# Skips both when they are up to date (image.sh's own check; the repository's image.sha256).
# Root, root namespace (the Debian mirror): image.sh and `cluster/packages/install.sh
# --guest-debs`, the one place packages are fetched, do the downloads.
# Env: NAME (debian-12-stock), REPO_PKGS (squid qemu-guest-agent), FORCE, SUITE.
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
NAME=${NAME:-debian-12-stock}
SUITE=${SUITE:-bookworm}
REPO_PKGS=${REPO_PKGS:-squid qemu-guest-agent}
log() { echo "stock-image.sh: $*"; }
[ "$(id -u)" = 0 ] || { echo "stock-image.sh: must run as root (image.sh)" >&2; exit 1; }

OUTDIR=${1:-${OUTDIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/images}}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
IMG=$OUTDIR/$NAME.qcow2
REPO=$OUTDIR/$NAME.repo
B=$OUTDIR/.build-$NAME

# image.sh's own package list, less REPO_PKGS.
# shellcheck disable=SC2016 # the sed pattern names image.sh's literal ${PKGS:-...}
PKGS=$(sed -n 's/^PKGS=\${PKGS:-\(.*\)}$/\1/p' "$HERE/image.sh")
[ -n "$PKGS" ] || { log "cannot read PKGS from image.sh" >&2; exit 1; }
for p in $REPO_PKGS; do
  PKGS=$(printf '%s' ",$PKGS," | sed "s/,$p,/,/g; s/^,//; s/,\$//")
done
export NAME SUITE PKGS

"$HERE/../packages/install.sh" --check
rm -rf "$B"
KEEP_BUILD=1 "$HERE/image.sh" "$OUTDIR"
sum=$(cut -d' ' -f1 "$IMG.sha256")
if [ ! -d "$B/root" ]; then
  if [ -s "$REPO/Packages" ] && [ "$(cat "$REPO/image.sha256" 2>/dev/null)" = "$sum" ]; then
    log "$REPO is up to date for $NAME.qcow2 ($sum), skipping"
    exit 0
  fi
  log "$REPO is missing or was made for another image: rebuilding the image to build it from its tree"
  FORCE=1 KEEP_BUILD=1 "$HERE/image.sh" "$OUTDIR"
  sum=$(cut -d' ' -f1 "$IMG.sha256")
fi
trap 'rm -rf "$B" "$REPO.tmp"' EXIT

rm -rf "$REPO.tmp"
mkdir -p "$REPO.tmp"
read -r -a want <<<"$REPO_PKGS"
"$HERE/../packages/install.sh" --guest-debs "$B/root" "$REPO.tmp" "${want[@]}"
(
  cd "$REPO.tmp"
  dpkg-scanpackages --multiversion . /dev/null >Packages 2>/dev/null
  gzip -9nk Packages
  {
    echo "Origin: provider-kvm test bed"
    echo "Label: provider-kvm test bed ($REPO_PKGS for $NAME)"
    echo "Suite: $SUITE"
    echo "Codename: $SUITE"
    echo "Date: $(LC_ALL=C date -uR)"
    echo "Architectures: amd64 all"
    echo "SHA256:"
    for f in Packages Packages.gz; do
      printf ' %s %s %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$(stat -c%s "$f")" "$f"
    done
  } >Release
  echo "$sum" >image.sha256
)
for p in $REPO_PKGS; do
  grep -qx "Package: $p" "$REPO.tmp/Packages" || { log "$p is not in the repository (installed in the image already?)" >&2; exit 1; }
done
rm -rf "$REPO"
mv "$REPO.tmp" "$REPO"
log "wrote $REPO: $(grep -c '^Package:' "$REPO/Packages") packages, $(du -sh "$REPO" | cut -f1), for $NAME.qcow2 ($sum)"
