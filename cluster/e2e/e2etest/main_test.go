//go:build e2e

// Package e2etest is the Go half of make e2e and make demo (docs/e2e.md). The shell scripts
// in cluster/e2e start the processes (etcd, kube-apiserver, kube-controller-manager, the
// Crossplane core, both functions, the registry, the provider and this package's HTTP
// servers) and make the PKI; everything else is here: installing the packages through the
// API, the Proxies and their checks, the deletion checks on the host, the timeline and the
// diagnostics.
//
// The tests run inside the test bed's network namespace against the control plane the scripts
// started, found through E2E_WORK (its kubeconfig, PKI and logs) and the variables lib.sh
// exports. TestMain also has modes that run no test, used by the scripts:
//
//	-e2e.serve            the image server and the 204 origin, until SIGTERM
//	-e2e.clean=NS,...     remove what is left of these namespaces on the test bed (libvirt calls)
//	-e2e.teardown=NS,...  delete their Proxies, claims and BaseImages through Kubernetes, wait
//	-e2e.diagnose         print the diagnostics (after a failed bring-up)
package e2etest

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	flagServe    = flag.Bool("e2e.serve", false, "serve the guest image and the 204 origin until SIGTERM; run no tests")
	flagClean    = flag.String("e2e.clean", "", "comma-separated namespaces: remove what is left of them on the test bed; run no tests")
	flagTeardown = flag.String("e2e.teardown", "", "comma-separated namespaces: delete their Proxies, claims and BaseImages through Kubernetes and wait for the host to be clean; run no tests")
	flagDiagnose = flag.Bool("e2e.diagnose", false, "print the diagnostics; run no tests")
)

func TestMain(m *testing.M) {
	flag.Parse()
	switch {
	case *flagServe:
		os.Exit(serveMain())
	case *flagClean != "":
		os.Exit(cleanMain(splitList(*flagClean)))
	case *flagTeardown != "":
		os.Exit(teardownMain(splitList(*flagTeardown)))
	case *flagDiagnose:
		os.Exit(diagnoseMain())
	}
	os.Exit(m.Run())
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// ------------------------------------------------------------------ configuration

// config is what the scripts pass in the environment (lib.sh sets and exports it); the
// defaults are lib.sh's.
type config struct {
	Work, Logs, Kubeconfig string
	Repo, Manifests        string
	Image                  string

	ImagePort, OriginPort, RegistryPort   int
	FnProxyPort, FnAutoReadyPort          int
	ProviderMetricsPort                   int
	PkgTag, Poll                          string
	VCPUs, MemMiB                         int
	GuestTimeout, DeleteTimeout           time.Duration
	SkipBaseline, KeepOnFailure           bool
	BringUpStart                          time.Time // E2E_T0; zero when the test runs on its own
	Netns, SSHHost, SSHUser, SSHKey       string
	SSHPort                               int
	KnownHosts, LibvirtSocket, LibvirtURI string
	Pool, Network                         string
}

func getenv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envInt(key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %s=%q is not a number; using %d\n", key, v, def)
		return def
	}
	return n
}

func loadConfig() config {
	cache := getenv("CACHE_DIR", filepath.Join(getenv("XDG_CACHE_HOME", filepath.Join(os.Getenv("HOME"), ".cache")), "provider-kvm"))
	// go test runs a package's tests in its directory; the scripts do the same.
	repo, _ := filepath.Abs(getenv("E2E_REPO", filepath.Join("..", "..", "..")))
	c := config{
		Work:                getenv("E2E_WORK", "/var/lib/provider-kvm-e2e"),
		Repo:                repo,
		Manifests:           getenv("E2E_MANIFESTS", filepath.Join(repo, "cluster", "e2e", "manifests")),
		Image:               getenv("E2E_IMAGE", getenv("TESTBED_IMAGE", filepath.Join(cache, "images", "debian-12-testbed.qcow2"))),
		ImagePort:           envInt("IMAGE_PORT", 18090),
		OriginPort:          envInt("ORIGIN_PORT", 18204),
		RegistryPort:        envInt("REGISTRY_PORT", 15000),
		FnProxyPort:         envInt("FN_PROXY_PORT", 19443),
		FnAutoReadyPort:     envInt("FN_AUTOREADY_PORT", 19444),
		ProviderMetricsPort: envInt("PROVIDER_METRICS_PORT", 18082),
		PkgTag:              getenv("PKG_TAG", "v0.0.0-e2e"),
		Poll:                getenv("POLL", "1m (default)"),
		VCPUs:               envInt("VCPUS", 2),
		MemMiB:              envInt("MEM_MIB", 1024),
		GuestTimeout:        time.Duration(envInt("GUEST_TIMEOUT", 900)) * time.Second,
		DeleteTimeout:       time.Duration(envInt("DELETE_TIMEOUT", 600)) * time.Second,
		SkipBaseline:        os.Getenv("SKIP_BASELINE") == "1",
		KeepOnFailure:       os.Getenv("KEEP_ON_FAILURE") == "1",
		Netns:               getenv("TESTBED_NETNS", "kvmhost"),
		SSHHost:             os.Getenv("TESTBED_SSH_HOST"),
		SSHPort:             envInt("TESTBED_SSH_PORT", 0),
		SSHUser:             getenv("TESTBED_SSH_USER", "root"),
		SSHKey:              os.Getenv("TESTBED_SSH_KEY"),
		KnownHosts:          os.Getenv("TESTBED_SSH_KNOWN_HOSTS"),
		LibvirtSocket:       getenv("TESTBED_LIBVIRT_SOCKET", "/run/libvirt/libvirt-sock"),
		LibvirtURI:          getenv("TESTBED_LIBVIRT_URI", "qemu:///system"),
		Pool:                getenv("TESTBED_POOL", "testbed"),
		Network:             getenv("TESTBED_NETWORK", "default"),
	}
	c.Logs = filepath.Join(c.Work, "logs")
	c.Kubeconfig = filepath.Join(c.Work, "kubeconfig")
	if s := os.Getenv("E2E_T0"); s != "" {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			c.BringUpStart = time.Unix(0, int64(f*1e9))
		}
	}
	return c
}

// ------------------------------------------------------------------ logging

// logf prints a progress line as the scripts do: [e2e 12:34:56] message. Progress goes to
// stdout as it happens (the scripts run the test binary with -test.v); failures go through
// t.Fatal.
func logf(format string, a ...any) {
	fmt.Printf("[%s %s] %s\n", getenv("LOG_TAG", "e2e"), time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func warnf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[%s %s] WARNING: %s\n", getenv("LOG_TAG", "e2e"), time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

// secs is a duration in seconds with one decimal, as the timeline shows it.
func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) }
