#!/usr/bin/env bash
# Build the real Crossplane tooling from Go modules only: no Docker, no registry, no release
# downloads. The binaries land in a cache directory outside the repository, so later runs skip
# the build.
#
#   cluster/crossplane/build.sh [TARGET...]     # default: all targets
#
# Targets (binaries in ${XDG_CACHE_HOME:-~/.cache}/provider-kvm/bin):
#   crossplane           the CLI (`crank`) from github.com/crossplane/crossplane/v2 v2.2.1: render,
#                        beta validate, xpkg build/push. v2.2.1 is the last release with cmd/crank
#                        in that module; later CLIs live in a module the Go proxy does not serve.
#   crossplane-core      the Crossplane core from github.com/crossplane/crossplane/v2 v2.4.0
#                        (cmd/crossplane), run out of cluster by `make e2e` and `make demo`.
#   function-auto-ready  crossplane-contrib/function-auto-ready v0.7.0 (its go.mod names itself
#                        github.com/crossplane/function-auto-ready, so it is built as the main
#                        module of a downloaded copy).
#   crane                go-containerregistry's crane v0.20.7, used as a loopback OCI registry.
#
# Idempotent: a binary that exists and reports the wanted version is kept (FORCE=1 rebuilds).
# Concurrent builds are serialised with flock; a run whose targets are built takes no lock.
#
# Why scratch modules and not `go install pkg@version`: the Go proxy here answers 403 to the
# version lists of crossplane modules, and `go install` reads them for deprecation notices. A
# scratch module with `go get module@exact-version` and `go build -mod=mod` works.
set -euo pipefail

BIN=${BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/bin}
WORK=${WORK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider-kvm/crossplane-build}
CLI_VERSION=${CLI_VERSION:-v2.2.1}
CORE_VERSION=${CORE_VERSION:-v2.4.0} # test/crossplane validate_test.go coreVersion and the Makefile's CROSSPLANE_CORE_VERSION follow it
AUTOREADY_VERSION=${AUTOREADY_VERSION:-v0.7.0}
CRANE_VERSION=${CRANE_VERSION:-v0.20.7}

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS=-buildvcs=false
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH

log() { printf '[crossplane] %s\n' "$*" >&2; }

mkdir -p "$BIN" "$WORK"
BIN=$(cd "$BIN" && pwd)

# fresh FILE STAMP: FILE exists and was built for STAMP (recorded next to it).
fresh() { [[ ${FORCE:-0} != 1 && -x $1 && -f $1.version && $(cat "$1.version") == "$2" ]]; }
stamp() { echo "$2" >"$1.version"; }

# need FILE STAMP WHAT: false (and says so) when FILE is built for STAMP. Otherwise it takes the
# build lock, once per run, and checks again under it: a run that finds its targets built never
# waits for another run's build of other targets (make test's test-tools beside .ci/run's
# second half, which builds the core for minutes), and two runs never build the same one.
locked=0
need() {
	if fresh "$1" "$2"; then
		log "$3: cached"
		return 1
	fi
	if [[ $locked == 0 ]]; then
		exec 9>"$BIN/.crossplane-build.lock"
		flock 9
		locked=1
	fi
	if fresh "$1" "$2"; then
		log "$3: cached"
		return 1
	fi
}

# The CLI and the core print a package-level version variable: internal/version up to v2.2,
# crossplane-runtime's pkg/version from v2.3. Set both so `crossplane version` is not empty
# (beta validate looks up Crossplane's own CRDs by that version).
ldflags() {
	echo "-s -w -X github.com/crossplane/crossplane/v2/internal/version.version=$1" \
		"-X github.com/crossplane/crossplane-runtime/v2/pkg/version.version=$1"
}

scratch() { # scratch DIR MODULE@VERSION...
	local dir=$1
	shift
	mkdir -p "$dir"
	(
		cd "$dir"
		[[ -f go.mod ]] || go mod init "provider-kvm.local/$(basename "$dir")" >/dev/null 2>&1
		for mv in "$@"; do go get "$mv"; done
	)
}

timed() { # timed WHAT CMD...
	local what=$1 t0=$SECONDS
	shift
	"$@"
	log "built $what in $((SECONDS - t0)) s"
}

build_cli() {
	local out=$BIN/crossplane
	need "$out" "$CLI_VERSION" "crossplane CLI $CLI_VERSION" || return 0
	log "building the crossplane CLI $CLI_VERSION (about 6 minutes on 2 cores the first time)"
	scratch "$WORK/cli-$CLI_VERSION" "github.com/crossplane/crossplane/v2@$CLI_VERSION"
	(cd "$WORK/cli-$CLI_VERSION" && timed "crossplane CLI" \
		go build -mod=mod -ldflags "$(ldflags "$CLI_VERSION")" -o "$out.tmp" github.com/crossplane/crossplane/v2/cmd/crank)
	mv "$out.tmp" "$out" && stamp "$out" "$CLI_VERSION"
}

build_core() {
	local out=$BIN/crossplane-core
	need "$out" "$CORE_VERSION" "crossplane core $CORE_VERSION" || return 0
	log "building the crossplane core $CORE_VERSION (about 5 minutes the first time)"
	# The core's go.mod replaces apis/v2 with ./apis, which a dependent module does not see:
	# pin the matching release instead.
	scratch "$WORK/core-$CORE_VERSION" "github.com/crossplane/crossplane/v2@$CORE_VERSION" \
		"github.com/crossplane/crossplane/apis/v2@$CORE_VERSION"
	(cd "$WORK/core-$CORE_VERSION" && timed "crossplane core" \
		go build -mod=mod -ldflags "$(ldflags "$CORE_VERSION")" -o "$out.tmp" github.com/crossplane/crossplane/v2/cmd/crossplane)
	mv "$out.tmp" "$out" && stamp "$out" "$CORE_VERSION"
}

build_autoready() {
	local out=$BIN/function-auto-ready dir
	need "$out" "$AUTOREADY_VERSION" "function-auto-ready $AUTOREADY_VERSION" || return 0
	log "building function-auto-ready $AUTOREADY_VERSION"
	dir=$(cd "$WORK" && GOFLAGS=-mod=mod go mod download -json "github.com/crossplane-contrib/function-auto-ready@$AUTOREADY_VERSION" |
		sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
	[[ -d $dir ]] || { log "cannot download function-auto-ready $AUTOREADY_VERSION"; exit 1; }
	rm -rf "$WORK/function-auto-ready"
	cp -r "$dir" "$WORK/function-auto-ready" && chmod -R u+w "$WORK/function-auto-ready"
	(cd "$WORK/function-auto-ready" && timed "function-auto-ready" go build -ldflags "-s -w" -o "$out.tmp" .)
	mv "$out.tmp" "$out" && stamp "$out" "$AUTOREADY_VERSION"
}

build_crane() {
	local out=$BIN/crane
	need "$out" "$CRANE_VERSION" "crane $CRANE_VERSION" || return 0
	log "building crane $CRANE_VERSION"
	scratch "$WORK/crane-$CRANE_VERSION" "github.com/google/go-containerregistry@$CRANE_VERSION"
	(cd "$WORK/crane-$CRANE_VERSION" && timed crane \
		go build -mod=mod -ldflags "-s -w" -o "$out.tmp" github.com/google/go-containerregistry/cmd/crane)
	mv "$out.tmp" "$out" && stamp "$out" "$CRANE_VERSION"
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(crossplane function-auto-ready crane crossplane-core)
for t in "${targets[@]}"; do
	case $t in
	crossplane) build_cli ;;
	crossplane-core) build_core ;;
	function-auto-ready) build_autoready ;;
	crane) build_crane ;;
	*)
		log "unknown target $t"
		exit 2
		;;
	esac
done
