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
package e2e

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

	ImagePort, OriginPort, RegistryPort int
	FnProxyPort, FnAutoReadyPort        int
	ProviderMetricsPort                 int
	PkgTag, Poll                        string
	VCPUs, MemMiB                       int
	GuestTimeout, DeleteTimeout         time.Duration
	SkipBaseline, KeepOnFailure         bool
	BringUpStart                        time.Time // E2E_T0; zero when the test runs on its own
	// Topology is "lan" (cluster/lan: the tests and the provider in netns node, two hosts
	// reached over SSH across the LAN, guests on each host's bridge) or "nat" (cluster/testbed:
	// one host in netns kvmhost reached on its loopback, guests on libvirt's NAT network).
	Topology string
	// Netns is the network namespace the tests run in (node or kvmhost).
	Netns string
	// Runtime is "node" (make e2e: the single-node Kubernetes of cluster/node, Crossplane
	// and the packages as pods, installed by cluster/node/packages.sh before the test) or
	// "local" (make demo and make bench-latency: the control plane and the Crossplane core out of
	// cluster, the provider and the functions as local processes, cluster/e2e/lib.sh).
	Runtime string
	// ImageHost is the address the image server listens on and BaseImages fetch from: the
	// node's LAN address when the provider runs in a pod, else 127.0.0.1.
	ImageHost                   string
	SSHUser, SSHKey, KnownHosts string
	LibvirtSocket, LibvirtURI   string // as each host's sshd session sees them
	Hosts                       []hostConfig
	// OriginIP is where the 204 origin listens (node's LAN address); empty: the NAT
	// network's gateway, read from libvirt.
	OriginIP string
	// GuestCIDR is the network the guests are on (empty: read from the NAT network).
	GuestCIDR string
}

// hostConfig is one libvirt host: its ClusterProviderConfig and the test's own view of it.
type hostConfig struct {
	Name            string // the ClusterProviderConfig's name
	SSHHost         string
	SSHPort         int
	Pool            string
	Network, Bridge string // how its guests attach (one of the two)
	// Socket, LibDir and LogDir are the host's libvirt socket, /var/lib/libvirt and
	// /var/log/libvirt as this machine's filesystem shows them (a LAN host keeps them in
	// private directories).
	Socket, LibDir, LogDir string
}

// host is the host of that ClusterProviderConfig.
func (c config) host(name string) (hostConfig, bool) {
	for _, h := range c.Hosts {
		if h.Name == name {
			return h, true
		}
	}
	return hostConfig{}, false
}

// attachment is the ClusterProviderConfig's defaults line for how guests attach.
func (h hostConfig) attachment() string {
	if h.Bridge != "" {
		return "bridge: " + h.Bridge
	}
	return "network: " + h.Network
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
	repo, _ := filepath.Abs(getenv("E2E_REPO", filepath.Join("..", "..")))
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
		Topology:            getenv("TOPOLOGY", "lan"),
		Runtime:             getenv("E2E_RUNTIME", "local"),
	}
	if c.Topology == "lan" {
		c.lanHosts()
	} else {
		c.natHost()
	}
	c.Logs = filepath.Join(c.Work, "logs")
	c.Kubeconfig = getenv("E2E_KUBECONFIG", filepath.Join(c.Work, "kubeconfig"))
	c.ImageHost = "127.0.0.1"
	if c.Runtime == "node" && c.OriginIP != "" {
		c.ImageHost = c.OriginIP
	}
	if s := os.Getenv("E2E_T0"); s != "" {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			c.BringUpStart = time.Unix(0, int64(f*1e9))
		}
	}
	return c
}

// natHost: the one test bed host of cluster/testbed (its env.sh, TESTBED_*), as "default".
func (c *config) natHost() {
	c.Netns = getenv("TESTBED_NETNS", "kvmhost")
	c.SSHUser = getenv("TESTBED_SSH_USER", "root")
	c.SSHKey = os.Getenv("TESTBED_SSH_KEY")
	c.KnownHosts = os.Getenv("TESTBED_SSH_KNOWN_HOSTS")
	c.LibvirtSocket = getenv("TESTBED_LIBVIRT_SOCKET", "/run/libvirt/libvirt-sock")
	c.LibvirtURI = getenv("TESTBED_LIBVIRT_URI", "qemu:///system")
	if os.Getenv("TESTBED_SSH_HOST") == "" {
		return
	}
	c.Hosts = []hostConfig{{
		Name:    "default",
		SSHHost: os.Getenv("TESTBED_SSH_HOST"), SSHPort: envInt("TESTBED_SSH_PORT", 0),
		Pool: getenv("TESTBED_POOL", "testbed"), Network: getenv("TESTBED_NETWORK", "default"),
		Socket: c.LibvirtSocket, LibDir: "/var/lib/libvirt", LogDir: "/var/log/libvirt",
	}}
}

// lanHosts: host-a and host-b of cluster/lan (its env.sh, LAN_*), each its own
// ClusterProviderConfig: host-a's is "default", host-b's "host-b".
func (c *config) lanHosts() {
	c.Netns = getenv("LAN_NODE_NETNS", "node")
	c.SSHUser = getenv("LAN_SSH_USER", "root")
	c.SSHKey = os.Getenv("LAN_SSH_KEY")
	c.KnownHosts = os.Getenv("LAN_SSH_KNOWN_HOSTS")
	c.LibvirtSocket = getenv("LAN_LIBVIRT_SOCKET", "/run/libvirt/libvirt-sock")
	c.LibvirtURI = getenv("LAN_LIBVIRT_URI", "qemu:///system")
	c.OriginIP = os.Getenv("LAN_NODE_IP")
	c.GuestCIDR = os.Getenv("LAN_SUBNET")
	dir := getenv("LAN_DIR", "/var/lib/provider-kvm-lan")
	for _, h := range strings.Fields(os.Getenv("LAN_HOSTS")) {
		v := func(k string) string {
			return os.Getenv("LAN_" + strings.ToUpper(strings.ReplaceAll(h, "-", "_")) + "_" + k)
		}
		if v("IP") == "" {
			continue
		}
		// The first host's ClusterProviderConfig is "default", the name the examples (and
		// Proxies without spec.host) use; the others are named after their host.
		name := h
		if len(c.Hosts) == 0 {
			name = "default"
		}
		c.Hosts = append(c.Hosts, hostConfig{
			Name: name, SSHHost: v("IP"), SSHPort: envInt("LAN_SSH_PORT", 22),
			Pool: v("POOL"), Bridge: v("BRIDGE"),
			Socket: filepath.Join(dir, h, "run", filepath.Base(c.LibvirtSocket)), LibDir: filepath.Join(dir, h, "lib"), LogDir: filepath.Join(dir, h, "log"),
		})
	}
}

// hostNames are the ClusterProviderConfigs the Proxies use: HOST_A and HOST_B (both the one
// host on the NAT test bed).
func (c config) hostNames() (a, b string) {
	if len(c.Hosts) == 0 {
		return "default", "default"
	}
	a, b = c.Hosts[0].Name, c.Hosts[0].Name
	if len(c.Hosts) > 1 {
		b = c.Hosts[1].Name
	}
	return a, b
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
