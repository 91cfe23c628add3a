# provider-kvm: a Crossplane provider for libvirt/KVM hosts reached over SSH.
#
#   make demo          a real control plane (Crossplane core, our packages, provider) and one
#                      running Proxy VM on the test bed; prints how to use it (make demo-down)
#   make test          unit tests, envtests (real kube-apiserver + etcd), integration tests
#                      against a real libvirtd + sshd test bed in a network namespace, then
#                      make e2e (Proxies end to end on a real control plane)
#   make run           run the provider against the cluster in $KUBECONFIG
#   make generate      regenerate deepcopy, method sets, resolvers and CRDs
#   make help          all targets
#
# Everything is built from Go modules and Debian packages; nothing is downloaded as a binary.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

export GOTOOLCHAIN := local
export PATH := /usr/local/go/bin:$(PATH)

CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/provider-kvm
# kube-apiserver and etcd for envtest, built once by cluster/controlplane/build.sh.
KUBEBUILDER_ASSETS ?= $(CACHE_DIR)/bin
export KUBEBUILDER_ASSETS
# The libvirt/sshd test bed (cluster/testbed): its state directory and network namespace.
TB ?= /var/lib/provider-kvm-testbed
export TB
# The Debian guest image the boot tests use, built once by cluster/testbed/image.sh.
TESTBED_IMAGE ?= $(CACHE_DIR)/images/debian-12-testbed.qcow2
export TESTBED_IMAGE
# The image without squid and qemu-guest-agent (a stock image's stand-in) and, beside it,
# debian-12-stock.repo: the local apt repository test/stockimage serves to its guest.
TESTBED_STOCK_IMAGE ?= $(CACHE_DIR)/images/debian-12-stock.qcow2
export TESTBED_STOCK_IMAGE

# Users of the LAN bed (its checks, make e2e, make demo, bench-latency) take this lock in turn.
LAN_LOCK ?= /tmp/lan.lock
# What make e2e, make bench-latency and make demo need built and running.
E2E_DEPS := deps controlplane node-build tools xpkg image lan-up

# -p 1: the integration tests of several packages share one libvirtd and sshd, and some of
# them restart those daemons on purpose; packages must not run at the same time.
# -ldflags=-w: test binaries without DWARF, which only a debugger reads; linking some fifty of
# them is a good part of a cold suite's compile time.
GO_TEST_FLAGS ?= -count=1 -p 1 -timeout 30m -ldflags=-w
# The version stamped into the binaries and the packages' image tags: the release tag on HEAD,
# else v0.1.0, which the Configuration's dependency constraints (>=v0.1.0) accept; set it for
# a release (make xpkg VERSION=v0.2.0).
VERSION ?= $(shell git describe --tags --exact-match 2>/dev/null || echo v0.1.0)
LDFLAGS := -X github.com/provider-kvm/provider-kvm/internal/version.Version=$(VERSION)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Programs that are not the provider, each a Go module of its own so that the provider's go.mod
# lists only what it ships and tests: the node's DNS and pause binary, mkimage and mkxpkg (make xpkg).
TOOL_MODULES := cluster/node cluster/xpkg/mkimage cluster/xpkg/mkxpkg

.PHONY: deps
deps: ## Download the Go modules (tests then run offline inside the test bed's namespace).
	go mod download
	for m in $(TOOL_MODULES); do (cd $$m && go mod download) || exit 1; done

.PHONY: packages
packages: ## Install every Debian package the scripts and tests need (cluster/packages/debian.txt), in one step.
	cluster/packages/install.sh

.PHONY: generate
generate: ## Regenerate deepcopy, crossplane-runtime method sets, resolvers and CRDs.
	go generate -tags generate ./apis/...

.PHONY: check-generate
check-generate: generate ## Fail when generated files are stale (what CI runs).
	@if [ -n "$$(git status --porcelain -- apis package/crds package/function/input)" ]; then \
		echo "Generated files are stale: run 'make generate' and commit the result:"; \
		git status --porcelain -- apis package/crds package/function/input; git --no-pager diff --stat -- apis package/crds package/function/input; exit 1; fi
	@echo "generated files are up to date"

.PHONY: lint
GOLANGCI_LINT ?= $(CACHE_DIR)/bin/golangci-lint
lint: packages ## golangci-lint (.golangci.yml; built from its Go module once, ~4 min cold) and shellcheck.
	BIN_DIR="$(CACHE_DIR)/bin" cluster/lint/build.sh
	$(GOLANGCI_LINT) run --build-tags e2e,lan,bench,faults ./...
	for m in $(TOOL_MODULES); do (cd $$m && $(GOLANGCI_LINT) run ./...) || exit 1; done
	shellcheck $$(git ls-files '*.sh') .ci/run

.PHONY: build
build: ## Build the provider binary into _output/.
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o _output/provider ./cmd/provider

# The crossplane CLI and function-auto-ready, built once by cluster/crossplane/build.sh; the
# tests in test/crossplane and cluster/xpkg/build.sh find them through these.
export CROSSPLANE_CLI ?= $(CACHE_DIR)/bin/crossplane
export FUNCTION_AUTO_READY ?= $(CACHE_DIR)/bin/function-auto-ready

.PHONY: tools
tools: ## Build the crossplane CLI, core, function-auto-ready and crane into $(CACHE_DIR)/bin (once; ~12 min cold).
	BIN_DIR="$(CACHE_DIR)/bin" cluster/crossplane/build.sh

.PHONY: xpkg
xpkg: tools ## Build the provider, function and configuration packages into _output/xpkg/ (offline, no Docker).
	VERSION="$(VERSION)" cluster/xpkg/build.sh

.PHONY: controlplane
controlplane: ## Build kube-apiserver, etcd, kube-controller-manager, kubectl into $(KUBEBUILDER_ASSETS) (once; ~12 min cold).
	cluster/controlplane/build.sh "$(KUBEBUILDER_ASSETS)"

# A single-node Kubernetes inside the LAN test bed's netns node (cluster/node/README.md): the
# control plane, containerd, kubelet and kube-proxy; pods on a CNI bridge. Not part of make test yet.
.PHONY: node-build node-up node-check node-crossplane node-packages node-hostcheck node-down
node-build: ## Build kubelet, kube-proxy, kube-scheduler v1.35.3 into $(KUBEBUILDER_ASSETS) (once; one go build, see cluster/node/README.md).
	cluster/node/build.sh "$(KUBEBUILDER_ASSETS)"
node-up: packages controlplane node-build tools lan-up ## Start the node in netns node (idempotent); cluster/node/kubectl.sh talks to it.
	cluster/node/up.sh
node-check: node-up ## A Deployment's pod as user 2000 reaching the API server through the kubernetes Service with its token.
	cluster/node/check.sh
node-crossplane: node-up ## The Crossplane core and RBAC manager as Deployments on the node (image of the v2.4.0 core made with mkimage).
	cluster/node/crossplane.sh
node-packages: node-crossplane xpkg ## The Provider and Function packages of make xpkg installed on the node: HEALTHY, the provider pod as 2000 with the RBAC manager's ClusterRole.
	cluster/node/packages.sh
node-hostcheck: node-packages lan-up ## The provider pod writes a SeedVolume into host-a's pool over SSH across the LAN, then deletes it (holds /tmp/testbed.lock).
	cluster/node/hostcheck.sh
node-down: ## Stop what node-up started (PURGE=1 also deletes its state).
	cluster/node/down.sh

.PHONY: testbed-up
testbed-up: packages ## Install and start libvirtd + sshd in network namespace kvmhost (idempotent).
	cluster/testbed/up.sh

.PHONY: image
image: packages ## Build the Debian 12 guest image for boot tests (once; ~4 min cold).
	cluster/testbed/image.sh "$(dir $(TESTBED_IMAGE))"

.PHONY: image-stock
image-stock: packages ## Build the guest image without squid and the guest agent, and a local apt repository of what it lacks (once; ~3 min cold).
	cluster/testbed/stock-image.sh "$(dir $(TESTBED_STOCK_IMAGE))"

.PHONY: boot-check
boot-check: testbed-up image ## Boot the guest image with plain virsh to squid 204 (the baseline).
	IMAGE="$(TESTBED_IMAGE)" cluster/testbed/boot-check.sh

.PHONY: testbed-down
testbed-down: ## Stop what testbed-up started.
	cluster/testbed/down.sh

# The LAN test bed (cluster/lan/README.md): a switch with DHCP, node, host-a and host-b, each in
# network namespaces of its own; it runs next to the test bed above without touching it.
.PHONY: lan-up lan-down test-lan
lan-up: packages ## Start the LAN test bed: netns lan (bridge + dnsmasq), node, host-a and host-b (libvirtd + sshd each); idempotent.
	cluster/lan/up.sh
lan-down: ## Stop what lan-up started.
	cluster/lan/down.sh
test-lan: deps lan-up image ## From netns node: SSH + libvirt on both hosts, a guest on host-a's bridge answering 204, nothing leaves the namespaces (~3 min).
	flock -o $(LAN_LOCK) cluster/lan/exec.sh node go test -tags lan -count=1 -v -timeout 20m ./test/lan/

.PHONY: test-unit
test-unit: ## Unit tests only: no control plane, no test bed.
	go test $(GO_TEST_FLAGS) ./...
	for m in $(TOOL_MODULES); do (cd $$m && go test $(GO_TEST_FLAGS) ./...) || exit 1; done

# make test: the NAT bed's Go suite, and beside it what make e2e needs (the node's binaries, the
# Crossplane core, the packages, the LAN bed) and the LAN's network checks; then make e2e.
#  - test-bed: the Go tests (unit, envtest with a real kube-apiserver + etcd, integration against
#    the libvirtd + sshd of netns kvmhost), then the tool modules' tests. It needs only
#    kube-apiserver, etcd, the Crossplane CLI, function-auto-ready, crane (test/crossplane pushes
#    the packages to a loopback registry) and the guest image.
#  - test-e2e-prep: builds what is missing for make e2e (a build another process holds is waited
#    for through the build scripts' locks) and runs the LAN checks, so on a cold machine the
#    bed's tests start while the node's binaries still compile.
# make e2e waits for the bed's suite: both boot guests under TCG, and the e2e boots four at once;
# on 2 cores the two together slowed every boot past its bound (decision 56). The bed's output
# is kept in _output/test/bed.log and printed when it has finished.
.PHONY: test test-bed test-e2e-prep test-tools envtest-bins
test: deps envtest-bins test-tools testbed-up image image-stock ## The README's test command: all tests with real parts (the test bed's suite, the LAN checks, then make e2e).
	@mkdir -p _output/test
	@echo "make test: the test bed's suite runs in the background (log: _output/test/bed.log); make e2e's builds and the LAN checks here"
	@bed=0 prep=0 e2e=0; \
	$(MAKE) --no-print-directory test-bed >_output/test/bed.log 2>&1 & pid=$$!; \
	$(MAKE) --no-print-directory test-e2e-prep || prep=$$?; \
	echo "make test: waiting for the test bed's suite"; \
	wait $$pid || bed=$$?; \
	echo; echo "=== the test bed's suite (_output/test/bed.log)"; cat _output/test/bed.log; \
	if [ $$prep -eq 0 ]; then SKIP_BASELINE="$${SKIP_BASELINE:-1}" $(MAKE) --no-print-directory e2e || e2e=$$?; fi; \
	passed=$$(grep -cE '^ok ' _output/test/bed.log || true); failed=$$(grep -cE '^FAIL[[:space:]]' _output/test/bed.log || true); \
	echo "make test: test bed exit $$bed, e2e builds and LAN checks exit $$prep, make e2e exit $$e2e"; \
	echo "packages: $$passed passed, $$failed failed"; \
	[ $$bed -eq 0 ] && [ $$prep -eq 0 ] && [ $$e2e -eq 0 ]

# The whole Go suite runs inside the test bed's network namespace: the SSH server and the guests
# live there, and the envtest control plane only needs loopback, which the namespace has. It
# holds /tmp/testbed.lock, as every other user of the test bed does (some tests restart its
# libvirtd), so two runs never share the bed. flock -o: the lock is flock's own, not inherited by
# the command, so what a killed test leaves running (envtest's etcd and kube-apiserver) cannot
# keep holding it. It starts from a clean bed (ctl.sh reset): a run cut earlier may have left
# test processes, domains and volumes behind. cluster/testbed/suite.sh runs the packages that keep
# to their own objects (BED_PARALLEL at a time, 3 by default), then those that need the bed alone.
test-bed: deps envtest-bins test-tools testbed-up image image-stock ## The Go tests on the NAT test bed (netns kvmhost), then the tool modules' tests.
	rm -f $(TB)/run/revived.log
	CI="$${CI:-}" GO_TEST_FLAGS="$(GO_TEST_FLAGS)" flock -o /tmp/testbed.lock sh -c 'cluster/testbed/ctl.sh reset && exec cluster/testbed/run-in-netns.sh cluster/testbed/suite.sh' || { cat $(TB)/run/revived.log 2>/dev/null; exit 1; }
	@cat $(TB)/run/revived.log 2>/dev/null || true
	for m in $(TOOL_MODULES); do (cd $$m && go test $(GO_TEST_FLAGS) ./...) || exit 1; done

# make test's e2e leaves out the plain-virsh baseline boot: it proves nothing about the provider
# that the Proxies do not (SKIP_BASELINE=0 keeps it); make e2e alone and make bench-latency boot it.
test-e2e-prep: $(E2E_DEPS) ## What make e2e needs, built, and the LAN's network checks.
	CI="$${CI:-}" flock -o $(LAN_LOCK) cluster/lan/exec.sh node go test -tags lan -count=1 -timeout 10m -run 'TestSSHAcrossTheLAN|TestHostKeysArePinned|TestTrafficStaysInside|TestHostStatusOnTheLAN' ./test/lan/

# What the test bed's Go suite needs: envtest's two servers, and the Crossplane CLI with
# function-auto-ready for test/crossplane, which validates the XRDs against the CRDs of the core
# the project runs (the module's source, downloaded here: the suite runs offline).
CROSSPLANE_CORE_VERSION ?= v2.4.0
envtest-bins:
	cluster/controlplane/build.sh "$(KUBEBUILDER_ASSETS)" kube-apiserver etcd
test-tools:
	BIN_DIR="$(CACHE_DIR)/bin" cluster/crossplane/build.sh crossplane function-auto-ready crane
	cd /tmp && GOFLAGS= GOWORK=off go mod download github.com/crossplane/crossplane/v2@$(CROSSPLANE_CORE_VERSION)

# End to end on the single-node Kubernetes of cluster/node (cluster/e2e, docs/e2e.md): the
# Crossplane core and the packages of make xpkg as pods, on the LAN test bed (netns node, libvirt
# hosts host-a and host-b over SSH, guests on their bridges). Proxies boot real guests under TCG.
# make e2e, make bench-latency and make demo bring it up the same way.

.PHONY: e2e
e2e: $(E2E_DEPS) ## Proxies end to end on two hosts across a LAN, Crossplane and the packages as pods on a single-node Kubernetes in netns node: every example of examples/proxy booted at once, squid 204 through each guest's LAN address, deletion, timeline vs plain virsh on the bridge (~12 min).
	flock -o $(LAN_LOCK) cluster/e2e/run.sh e2e

.PHONY: bench-latency
bench-latency: $(E2E_DEPS) ## What the provider adds to a Proxy's boot, at its default flags: setup, readiness and deletion latency, boot vs plain virsh on the same bridge (BENCH_RUNS=3 runs, ~20 min).
	flock -o $(LAN_LOCK) cluster/e2e/run.sh bench

.PHONY: demo
demo: $(E2E_DEPS) ## Bring up the node, Crossplane, the provider and one running Proxy, print how to use it (first run builds ~25 min).
	flock -o $(LAN_LOCK) cluster/e2e/demo.sh up

.PHONY: demo-down
demo-down: ## Stop make demo: delete its Proxy through Kubernetes, stop the servers and the node, check the hosts are clean.
	cluster/e2e/demo.sh down

.PHONY: bench
bench: deps testbed-up ## Benchmarks (libvirt round trip over pooled SSH, connection open).
	cluster/testbed/run-in-netns.sh go test -run '^$$' -bench . -benchmem -benchtime=20x ./...

.PHONY: bench-observe
bench-observe: deps controlplane testbed-up ## Calls and new libvirt connections per steady-state Observe of each kind, 1/10/100 resources (~10 min).
	@mkdir -p _output
	BENCH_OBSERVE=1 BENCH_OBSERVE_OUT="$(CURDIR)/_output/bench-observe.txt" CI="$${CI:-}" cluster/testbed/run-in-netns.sh \
		go test -tags bench -count=1 -timeout 60m -run '^TestObserveCost$$' ./test/bench/
	@cat _output/bench-observe.txt

.PHONY: bench-scale
bench-scale: deps controlplane testbed-up ## Scale: 50, 250, 500, 1,000 shut-off KVMDomains and their seeds on one host; RSS, heap, CPU, calls, SSH, p99, API (~60 min; docs/performance.md).
	@mkdir -p _output/scale
	SCALE_STEPS="$${SCALE_STEPS:-50,250,500,1000}" SCALE_OUT="$(CURDIR)/_output/scale/bench-scale.txt" CI="$${CI:-}" flock -o /tmp/testbed.lock \
		cluster/testbed/run-in-netns.sh go test -count=1 -v -timeout 170m -run '^TestScale$$' ./test/scale/
	@cat _output/scale/bench-scale.txt

# The same totals split evenly over the LAN bed's two hosts: the provider runs in netns node (as
# test/lan does) with a ClusterProviderConfig per host; the libvirtd restart is host-b's.
.PHONY: bench-scale-lan
bench-scale-lan: deps controlplane lan-up ## Scale over the LAN bed's two hosts: the same steps split evenly over host-a and host-b, SSH per host, host-b's libvirtd restarted (~60 min; docs/performance.md).
	@mkdir -p _output/scale
	SCALE_HOSTS=lan SCALE_STEPS="$${SCALE_STEPS:-50,250,500,1000}" SCALE_OUT="$(CURDIR)/_output/scale/bench-scale-lan.txt" CI="$${CI:-}" flock -o $(LAN_LOCK) \
		cluster/lan/exec.sh node go test -count=1 -v -timeout 170m -run '^TestScale$$' ./test/scale/
	@cat _output/scale/bench-scale-lan.txt

# The fault suite (test/faults, docs/testing.md): the provider as a real process, built
# with -tags faults, SIGKILLed between the steps of creating and deleting each kind and
# restarted with empty status; a host blackholed for two minutes while another keeps working.
# A fast subset of it runs in make test; this runs all of it. The table: _output/faults/results.txt.
.PHONY: test-faults
test-faults: deps controlplane testbed-up ## The whole fault suite: kill between every two steps of each kind, a blackholed host (~25 min).
	FAULTS_FULL=1 CI="$${CI:-}" flock -o /tmp/testbed.lock cluster/testbed/run-in-netns.sh \
		go test -count=1 -p 1 -timeout 60m -v -run '^TestFaults$$' ./test/faults/
	@cat _output/faults/results.txt

.PHONY: bench-boot
bench-boot: deps controlplane testbed-up image ## Boot to squid 204: plain virsh, then through the provider; prints both.
	IMAGE="$(TESTBED_IMAGE)" cluster/testbed/boot-check.sh | tail -n 1
	cluster/testbed/run-in-netns.sh go test -count=1 -v -run TestKVMDomainBootsOnRealHost ./internal/controller/kvmdomain/ | grep -E 'TIMING|^(ok|FAIL|---)'

# What the Proxy's package check adds to a boot of an image that has squid and the guest agent,
# measured inside the guest (cloud-init's timing of its bootcmd), and the stock image's boot with
# the install from the bed's local apt repository.
.PHONY: bench-boot-packages
bench-boot-packages: deps testbed-up image image-stock ## The package check's cost when present, and a stock image's boot with the install (two guest boots, ~6 min).
	CI="$${CI:-}" flock -o /tmp/testbed.lock cluster/testbed/run-in-netns.sh go test -tags bench -count=1 -v -timeout 30m \
		-run '^(TestPresentPackagesBootCost|TestStockImageInstallsSquid)$$' ./test/stockimage/ | grep -E 'TIMING|^(ok|FAIL|---)'

.PHONY: run
run: ## Run the provider out of cluster against $KUBECONFIG (install package/crds first).
	go run -ldflags "$(LDFLAGS)" ./cmd/provider --debug

.PHONY: install-crds
install-crds: ## kubectl apply the CRDs to the cluster in $KUBECONFIG.
	kubectl apply --server-side -f package/crds
