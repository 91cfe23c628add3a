//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestConfig reads a configuration as lib.sh's write_config writes it (the LAN's lines as
// cluster/lan's env.sh has them) and rejects what is no configuration.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	good := `# written by write_config
MODE=bench
REPO=/src/provider-kvm
OUT=/src/provider-kvm/_output/e2e
IMAGE=/cache/debian.qcow2
NODE_DIR=/var/lib/node
VCPUS=1
GUEST_TIMEOUT=60
SKIP_BASELINE=1
T0=1700000000.5
export LAN_DIR=/var/lib/lan
export LAN_SUBNET=10.77.0.0/24
export LAN_NODE_IP=10.77.0.10
export LAN_NODE_NETNS=node
export LAN_HOSTS='host-a host-b host-c'
export LAN_SSH_KEY="/var/lib/lan/ssh/id_ed25519"
export LAN_HOST_A_IP=10.77.0.11
export LAN_HOST_A_BRIDGE=br0
export LAN_HOST_A_POOL=pool-host-a
export LAN_HOST_B_IP=10.77.0.12
export LAN_HOST_B_BRIDGE=br0
export LAN_HOST_B_POOL=pool-host-b
`
	path := filepath.Join(dir, "e2e.env")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		Mode, Work, Kubeconfig, Image, ImageHost, SSHKey string
		VCPUs, MemMiB                                    int
		GuestTimeout                                     time.Duration
		SkipBaseline                                     bool
		T0                                               int64
		Hosts                                            []hostConfig
	}
	got := view{c.Mode, c.Work, c.Kubeconfig, c.Image, c.ImageHost, c.SSHKey, c.VCPUs, c.MemMiB, c.GuestTimeout, c.SkipBaseline, c.BringUpStart.UnixMilli(), c.Hosts}
	want := view{
		Mode: ModeBench, Work: dir, Kubeconfig: "/var/lib/node/admin.kubeconfig", Image: "/cache/debian.qcow2",
		ImageHost: "10.77.0.10", SSHKey: "/var/lib/lan/ssh/id_ed25519", VCPUs: 1, MemMiB: 1024, GuestTimeout: time.Minute,
		SkipBaseline: true, T0: 1700000000500,
		// host-c has no address: not a host of this run.
		Hosts: []hostConfig{
			{Name: "default", LAN: "host-a", SSHHost: "10.77.0.11", SSHPort: 22, Pool: "pool-host-a", Bridge: "br0", BridgeCIDR: "10.77.0.0/24",
				Socket: "/var/lib/lan/host-a/run/libvirt-sock", LibDir: "/var/lib/lan/host-a/lib", LogDir: "/var/lib/lan/host-a/log"},
			{Name: "host-b", LAN: "host-b", SSHHost: "10.77.0.12", SSHPort: 22, Pool: "pool-host-b", Bridge: "br0", BridgeCIDR: "10.77.0.0/24",
				Socket: "/var/lib/lan/host-b/run/libvirt-sock", LibDir: "/var/lib/lan/host-b/lib", LogDir: "/var/lib/lan/host-b/log"},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LoadConfig: -want +got:\n%s", diff)
	}

	for name, text := range map[string]string{
		"a line that is no KEY=VALUE": "MODE=e2e\njust words\n",
		"a number that is none":       "VCPUS=two\n",
		"a T0 that is no time":        "T0=yesterday\n",
	} {
		p := filepath.Join(dir, "bad.env")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadConfig(p); err == nil {
			t.Errorf("%s: LoadConfig accepted %q", name, text)
		}
	}
	if _, err := LoadConfig(filepath.Join(dir, "absent.env")); err == nil {
		t.Error("LoadConfig of a missing file: no error")
	}
}
