#!/usr/bin/env bash
# install.sh [--check] -- the one step that installs Debian packages: every package listed in
# debian.txt (next to this script) that is not installed yet, with apt-get, in the ROOT network
# namespace (inside a test bed namespace there is no DNS and no route to the mirror, so it
# refuses to run there). Afterwards it checks each package's proof (a command or a file).
#   --check   install nothing; exit 1 naming what is missing (scripts that need packages call
#             this, so a missing package is a clear message, never an apt-get in a namespace)
#   --guest-debs ROOT OUTDIR PKG...
#             install nothing on this machine: download into OUTDIR the .deb files that apt in
#             the Debian tree ROOT (a guest image's build root, with its own sources and dpkg
#             status) would install for PKG..., its dependency closure with Recommends, as
#             cloud-init's apt-get would in the guest (cluster/testbed/stock-image.sh builds a
#             local apt repository of them). The package lists go into ROOT, not this machine's.
# Maintainer scripts are kept from starting services in the root namespace (policy-rc.d).
set -euo pipefail
HERE=$(dirname "$(readlink -f "$0")")
LIST=${PACKAGE_LIST:-$HERE/debian.txt}
log() { echo "packages: $*"; }

mapfile -t rows < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$LIST")
installed() { [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == *"ok installed"* ]]; }
proven() { case "$1" in /*) [[ -e $1 ]] ;; *) command -v "$1" >/dev/null ;; esac; }

# in_netns: this process is in a network namespace other than the root one: PID 1's, where it
# can be read; one of the named namespaces (ip netns); or any namespace without a default
# route (an `unshare --net`, a test bed namespace), from which the mirror is unreachable.
in_netns() {
  local self n
  self=$(stat -Lc '%d:%i' /proc/self/ns/net)
  if n=$(stat -Lc '%d:%i' /proc/1/ns/net 2>/dev/null); then [[ $self != "$n" ]] && return 0; fi
  for n in /run/netns/*; do
    [[ -e $n ]] && [[ $(stat -Lc '%d:%i' "$n") == "$self" ]] && return 0
  done
  ! awk 'NR > 1 && $2 == "00000000" { found = 1 } END { exit !found }' /proc/net/route
}

if [[ ${1:-} == --guest-debs ]]; then
  (($# >= 4)) || { log "usage: $0 --guest-debs ROOT OUTDIR PKG..." >&2; exit 2; }
  root=$2 out=$3
  shift 3
  [[ -s $root/var/lib/dpkg/status && -d $root/etc/apt ]] || { log "$root is not a Debian tree" >&2; exit 1; }
  if in_netns; then
    log "refusing to run apt-get inside a network namespace (no DNS there): $*" >&2
    exit 1
  fi
  mkdir -p "$out/partial" "$root/var/lib/apt/lists/partial" "$root/var/cache/apt/archives/partial"
  # Dir=ROOT: ROOT's sources, lists, status and caches; the archives go to OUTDIR.
  gapt() { apt-get -q -o Dir="$root" -o Dir::State::status="$root/var/lib/dpkg/status" \
    -o Dir::Cache::archives="$out" -o APT::Install-Recommends=true -o APT::Sandbox::User=root -o Debug::NoLocking=true "$@"; }
  gapt update >/dev/null
  gapt install -y --download-only "$@" >/dev/null
  rm -rf "$out/partial" "$out/lock"
  log "$(find "$out" -maxdepth 1 -name '*.deb' | wc -l) .deb files for $* in $out"
  exit 0
fi

missing=()
unproven=()
for r in "${rows[@]}"; do
  read -r pkg proof _ <<<"$r"
  installed "$pkg" || missing+=("$pkg")
  proven "$proof" || unproven+=("$pkg ($proof)")
done

if [[ ${1:-} == --check ]]; then
  if ((${#missing[@]} + ${#unproven[@]})); then
    log "missing Debian packages: ${missing[*]:-} ${unproven[*]:-}" >&2
    log "install them with: cluster/packages/install.sh (as root, outside any network namespace)" >&2
    exit 1
  fi
  exit 0
fi

if ((${#missing[@]})); then
  [[ $(id -u) == 0 ]] || { log "must run as root to install: ${missing[*]}" >&2; exit 1; }
  if in_netns; then
    log "refusing to run apt-get inside a network namespace (no DNS there): ${missing[*]}" >&2
    exit 1
  fi
  log "installing ${#missing[@]}: ${missing[*]}"
  made_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  trap '[[ $made_policy == 1 ]] && rm -f /usr/sbin/policy-rc.d' EXIT
  apt() { DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600 "$@"; }
  # Empty or stale package lists: update first, and once more if the install still fails.
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then apt update >/dev/null; fi
  if ! apt install -y --no-install-recommends "${missing[@]}" >/dev/null; then
    apt update >/dev/null
    apt install -y --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

bad=()
for r in "${rows[@]}"; do
  read -r pkg proof _ <<<"$r"
  proven "$proof" || bad+=("$pkg ($proof)")
done
((${#bad[@]} == 0)) || { log "installed, but not found: ${bad[*]}" >&2; exit 1; }
log "all ${#rows[@]} Debian packages present"
