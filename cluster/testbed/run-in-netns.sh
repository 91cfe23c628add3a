#!/usr/bin/env bash
# run-in-netns.sh CMD... -- run CMD inside the test bed's network namespace with the
# TESTBED_* variables of $TB/env.sh exported, e.g.
#   cluster/testbed/run-in-netns.sh go test -count=1 ./internal/host/...
# The namespace has only loopback (and the libvirt NAT bridge), so GOPROXY=off keeps the
# go tool from trying the network; modules must already be in the module cache.
set -euo pipefail
TB=${TB:-/var/lib/provider-kvm-testbed}
[ -r "$TB/env.sh" ] || { echo "run-in-netns.sh: $TB/env.sh missing; run cluster/testbed/up.sh first" >&2; exit 1; }
# shellcheck disable=SC1091
. "$TB/env.sh"
export GOPROXY=off
exec ip netns exec "$TESTBED_NETNS" "$@"
