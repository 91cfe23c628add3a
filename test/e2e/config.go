//go:build e2e

// Package e2e is the Go half of make e2e, make bench-latency and make demo (docs/e2e.md): the
// shell scripts in cluster/e2e bring up the single-node Kubernetes of cluster/node with the
// Crossplane core and the packages as pods, and start this package's HTTP servers; everything
// else is here: the installation's checks through the API, the Proxies and their checks, the
// deletion checks on the hosts, the timeline and the diagnostics.
//
// The tests (built with -tags e2e) and the helper command e2ectl (test/e2e/e2ectl: serve,
// clean, teardown, diagnose) read one file, the run's configuration, which cluster/e2e/lib.sh
// writes at the start of a run (Config, LoadConfig).
package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// DefaultConfigFile is where cluster/e2e/lib.sh writes the run's configuration.
const DefaultConfigFile = "/var/lib/provider-kvm-e2e/e2e.env"

// DefaultClientImage is the application pod's image: cluster/node/httpget as cluster/node/up.sh
// pushes it to the node's registry (lib.sh HTTPGET_IMAGE), which containerd pulls from on
// loopback.
const DefaultClientImage = "127.0.0.1:25000/node/httpget:1"

// Mode is what a run does: the e2e, the latency bench or the demo.
const (
	ModeE2E   = "e2e"
	ModeBench = "bench"
	ModeDemo  = "demo"
)

// config is the run's configuration: the file lib.sh writes (write_config), KEY=VALUE lines,
// the LAN test bed's facts (LAN_*, cluster/lan's env.sh) among them.
type config struct {
	Mode                   string
	Work, Logs, Kubeconfig string
	Repo, Manifests, Out   string
	Image                  string
	NodeDir                string
	// Bin is where the tools are built (kubectl, crossplane: ~/.cache/provider-kvm/bin).
	Bin string
	// NodeRegistry is the node's registry as pods reach it (cluster/node's POD_REGISTRY).
	NodeRegistry string
	// ClientImage is the application pod's image (cluster/node/httpget), which cluster/node/up.sh
	// pushes to the node's registry.
	ClientImage string

	ImagePort, OriginPort int
	// ImageTLSPort and ImageUntrustedPort are the HTTPS image servers' ports: the first's
	// certificate is of the CA the provider's pod trusts (its DeploymentRuntimeConfig), the
	// second's of one it does not.
	ImageTLSPort, ImageUntrustedPort int
	Poll                             string
	VCPUs, MemMiB                    int
	BenchRuns                        int
	GuestTimeout                     time.Duration
	DeleteTimeout                    time.Duration
	SkipBaseline                     bool
	KeepOnFailure                    bool
	BringUpStart                     time.Time // T0: when the bring-up began; zero when unknown
	// Netns is the network namespace the tests run in (the LAN's node).
	Netns string
	// ImageHost is the address the image server listens on and BaseImages fetch from: the
	// node's LAN address, which the provider's pod reaches.
	ImageHost                   string
	SSHUser, SSHKey, KnownHosts string
	LibvirtSocket, LibvirtURI   string // as each host's sshd session sees them
	Hosts                       []hostConfig
	// OriginIP is where the 204 origin listens (node's LAN address); GuestCIDR is the
	// network the guests are on (the LAN).
	OriginIP, GuestCIDR string
	// DHCPLeases is the LAN's DHCP lease file (dnsmasq's), readable from node.
	DHCPLeases string
}

// hostConfig is one libvirt host: its ClusterProviderConfig and the test's own view of it.
type hostConfig struct {
	Name    string // the ClusterProviderConfig's name
	LAN     string // the host's name on the LAN bed (cluster/lan/ctl.sh)
	SSHHost string
	SSHPort int
	Pool    string
	Bridge  string // the bridge its guests attach to
	// BridgeCIDR is the range guests on Bridge take addresses from (the LAN's subnet): the
	// provider uses an address the guest agent reports only inside it.
	BridgeCIDR string
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

// attachment is the ClusterProviderConfig's defaults lines for how guests attach: the bridge
// and its range (two keys of the defaults mapping, which the manifest indents by four spaces).
func (h hostConfig) attachment() string {
	if h.BridgeCIDR == "" {
		return "bridge: " + h.Bridge
	}
	return "bridge: " + h.Bridge + "\n    bridgeCIDRs: [\"" + h.BridgeCIDR + "\"]"
}

// settings are the KEY=VALUE lines of a configuration file.
type settings map[string]string

// readSettings parses a file of KEY=VALUE lines, as lib.sh writes it and as cluster/lan's
// env.sh is (an "export " prefix and single or double quotes around a value are allowed;
// blank lines and # comments are skipped).
func readSettings(path string) (settings, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the e2e configuration: %w", err)
	}
	defer func() { _ = f.Close() }()
	s := settings{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("%s:%d: not KEY=VALUE: %q", path, n, line)
		}
		if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		s[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return s, nil
}

func (s settings) str(key, def string) string {
	if v := s[key]; v != "" {
		return v
	}
	return def
}

func (s settings) num(key string, def int) (int, error) {
	v := s[key]
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("e2e configuration: %s=%q is not a number", key, v)
	}
	return n, nil
}

// LoadConfig reads the run's configuration from path (DefaultConfigFile when empty).
func LoadConfig(path string) (config, error) {
	if path == "" {
		path = DefaultConfigFile
	}
	s, err := readSettings(path)
	if err != nil {
		return config{}, err
	}
	return configFrom(s, filepath.Dir(path))
}

// defaultConfig is the configuration of a test that needs no run: the defaults, no hosts.
func defaultConfig() config {
	c, _ := configFrom(settings{}, "/var/lib/provider-kvm-e2e")
	return c
}

// configFrom is the configuration the settings give, with lib.sh's defaults; work is the
// run's work directory (the file's).
func configFrom(s settings, work string) (config, error) {
	// go test runs a package's tests in its directory; e2ectl runs there too.
	repo, err := filepath.Abs(s.str("REPO", filepath.Join("..", "..")))
	if err != nil {
		return config{}, err
	}
	c := config{
		Mode:          s.str("MODE", ModeE2E),
		Work:          work,
		Repo:          repo,
		Manifests:     filepath.Join(repo, "cluster", "e2e", "manifests"),
		Out:           s.str("OUT", filepath.Join(repo, "_output", "e2e")),
		Image:         s.str("IMAGE", ""),
		NodeDir:       s.str("NODE_DIR", "/var/lib/provider-kvm-node"),
		ClientImage:   s.str("CLIENT_IMAGE", DefaultClientImage),
		Poll:          s.str("POLL", "1m (default)"),
		SkipBaseline:  s["SKIP_BASELINE"] == "1",
		KeepOnFailure: s["KEEP_ON_FAILURE"] == "1",
		Netns:         s.str("LAN_NODE_NETNS", "node"),
		SSHUser:       s.str("LAN_SSH_USER", "root"),
		SSHKey:        s["LAN_SSH_KEY"],
		KnownHosts:    s["LAN_SSH_KNOWN_HOSTS"],
		LibvirtSocket: s.str("LAN_LIBVIRT_SOCKET", "/run/libvirt/libvirt-sock"),
		LibvirtURI:    s.str("LAN_LIBVIRT_URI", "qemu:///system"),
		OriginIP:      s["LAN_NODE_IP"],
		GuestCIDR:     s["LAN_SUBNET"],
		DHCPLeases:    s["LAN_DHCP_LEASES"],
	}
	c.Logs = filepath.Join(c.Work, "logs")
	c.Kubeconfig = filepath.Join(c.NodeDir, "admin.kubeconfig")
	c.ImageHost = c.OriginIP
	home, _ := os.UserHomeDir()
	c.Bin = s.str("BIN", filepath.Join(home, ".cache", "provider-kvm", "bin"))
	c.NodeRegistry = s.str("NODE_REGISTRY", c.OriginIP+":25000")
	var guestTimeout, deleteTimeout int
	for _, n := range []struct {
		key string
		def int
		to  *int
	}{
		{"IMAGE_PORT", 18090, &c.ImagePort}, {"ORIGIN_PORT", 18204, &c.OriginPort},
		{"IMAGE_TLS_PORT", 18443, &c.ImageTLSPort}, {"IMAGE_UNTRUSTED_PORT", 18444, &c.ImageUntrustedPort},
		{"VCPUS", 2, &c.VCPUs}, {"MEM_MIB", 1024, &c.MemMiB}, {"BENCH_RUNS", 3, &c.BenchRuns},
		{"GUEST_TIMEOUT", 900, &guestTimeout}, {"DELETE_TIMEOUT", 600, &deleteTimeout},
	} {
		if *n.to, err = s.num(n.key, n.def); err != nil {
			return config{}, err
		}
	}
	c.GuestTimeout = time.Duration(guestTimeout) * time.Second
	c.DeleteTimeout = time.Duration(deleteTimeout) * time.Second
	if v := s["T0"]; v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return config{}, fmt.Errorf("e2e configuration: T0=%q is not a time", v)
		}
		c.BringUpStart = time.Unix(0, int64(f*1e9))
	}
	c.Hosts, err = lanHosts(s)
	return c, err
}

// lanHosts: the hosts of cluster/lan (LAN_HOSTS, LAN_<HOST>_*), each its own
// ClusterProviderConfig: the first one's is "default", the name the examples (and Proxies
// without spec.host) use; the others are named after their host.
func lanHosts(s settings) ([]hostConfig, error) {
	dir := s.str("LAN_DIR", "/var/lib/provider-kvm-lan")
	port, err := s.num("LAN_SSH_PORT", 22)
	if err != nil {
		return nil, err
	}
	sock := filepath.Base(s.str("LAN_LIBVIRT_SOCKET", "/run/libvirt/libvirt-sock"))
	var out []hostConfig
	for _, h := range strings.Fields(s["LAN_HOSTS"]) {
		key := "LAN_" + strings.ToUpper(strings.ReplaceAll(h, "-", "_")) + "_"
		if s[key+"IP"] == "" {
			continue
		}
		name := h
		if len(out) == 0 {
			name = "default"
		}
		out = append(out, hostConfig{
			Name: name, LAN: h, SSHHost: s[key+"IP"], SSHPort: port,
			Pool: s[key+"POOL"], Bridge: s[key+"BRIDGE"], BridgeCIDR: s["LAN_SUBNET"],
			Socket: filepath.Join(dir, h, "run", sock), LibDir: filepath.Join(dir, h, "lib"), LogDir: filepath.Join(dir, h, "log"),
		})
	}
	return out, nil
}

// hostNames are the ClusterProviderConfigs the Proxies use: the first host's and the second's.
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
	fmt.Printf("[e2e %s] %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

func warnf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[e2e %s] WARNING: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

// secs is a duration in seconds with one decimal, as the timeline shows it.
func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) }
