// Package lanbed gives tests the two libvirt hosts of the LAN test bed that cluster/lan/up.sh
// starts (host-a and host-b, each with its own sshd and libvirtd), described by the LAN_*
// variables of its env.sh. Tests run inside netns node through cluster/lan/exec.sh node, as a
// provider would: every connection to a host starts there and crosses the LAN.
//
// Without the bed a test is skipped with a loud reason, except when CI is set: then it fails.
package lanbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/hostinspect"
	"github.com/provider-kvm/provider-kvm/test/support/netns"
)

// Host is one libvirt host of the bed.
type Host struct {
	Name    string // host-a, host-b: also the name tests give its ClusterProviderConfig
	IP      string // its sshd's LAN address
	Pool    string // its dir pool
	PoolDir string // the pool's directory on this machine's filesystem
	Bridge  string // the bridge its guests attach to
}

// Env is the bed as env.sh describes it.
type Env struct {
	Dir            string // LAN_DIR
	User           string // the SSH user on every host
	SSHPort        int
	KeyFile        string // the client key, authorized on every host
	KnownHostsFile string // every host's pinned key
	Socket         string // libvirtd's socket as a host's sshd session sees it
	Hosts          []Host
}

// Require returns the bed, or skips (fails under CI) when the LAN_* variables are missing, the
// process is not root, or it is not inside netns node.
func Require(t testing.TB) *Env {
	t.Helper()
	for _, v := range []string{"LAN_DIR", "LAN_NODE_NETNS", "LAN_HOSTS", "LAN_SSH_KEY", "LAN_SSH_KNOWN_HOSTS"} {
		if os.Getenv(v) == "" {
			missing(t, "environment variable "+v+" is not set")
		}
	}
	if os.Geteuid() != 0 {
		missing(t, "not root (cluster/lan/ctl.sh and the hosts' libvirt sockets need it)")
	}
	if err := netns.Inside(os.Getenv("LAN_NODE_NETNS")); err != nil {
		missing(t, err.Error())
	}
	e, err := FromEnv(os.Getenv)
	if err != nil {
		t.Fatalf("%v: rerun make lan-up", err)
	}
	return e
}

// FromEnv reads the bed from the LAN_* variables getenv returns.
func FromEnv(getenv func(string) string) (*Env, error) {
	e := &Env{Dir: getenv("LAN_DIR"), User: getenv("LAN_SSH_USER"), KeyFile: getenv("LAN_SSH_KEY"),
		KnownHostsFile: getenv("LAN_SSH_KNOWN_HOSTS"), Socket: getenv("LAN_LIBVIRT_SOCKET"), SSHPort: 22}
	if e.User == "" {
		e.User = "root"
	}
	if e.Socket == "" {
		e.Socket = "/run/libvirt/libvirt-sock"
	}
	if v := getenv("LAN_SSH_PORT"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("LAN_SSH_PORT=%q: %w", v, err)
		}
		e.SSHPort = p
	}
	for _, name := range strings.Fields(getenv("LAN_HOSTS")) {
		v := "LAN_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_"
		h := Host{Name: name, IP: getenv(v + "IP"), Pool: getenv(v + "POOL"), PoolDir: getenv(v + "POOL_DIR"), Bridge: getenv(v + "BRIDGE")}
		if h.IP == "" || h.Pool == "" || h.PoolDir == "" || h.Bridge == "" {
			return nil, fmt.Errorf("env.sh describes host %s incompletely (%+v)", name, h)
		}
		e.Hosts = append(e.Hosts, h)
	}
	if len(e.Hosts) < 2 {
		return nil, fmt.Errorf("LAN_HOSTS=%q: want two hosts", getenv("LAN_HOSTS"))
	}
	return e, nil
}

// Inspect is h's libvirtd as test/support/hostinspect sees it: its socket, /var/lib/libvirt and
// pool directory on this machine's filesystem (the bind mounts' sources), not over SSH.
func (e *Env) Inspect(h Host) *hostinspect.Host {
	dir := filepath.Join(e.Dir, h.Name)
	return &hostinspect.Host{Name: h.Name, Socket: filepath.Join(dir, "run", filepath.Base(e.Socket)), URI: "qemu:///system",
		Pool: h.Pool, PoolDir: h.PoolDir, LibDir: filepath.Join(dir, "lib"), LogDir: filepath.Join(dir, "log")}
}

// Control runs cluster/lan/ctl.sh HOST ACTION (stop-libvirtd, start-libvirtd); the caller holds
// the bed's lock, as every user of the bed does.
func (e *Env) Control(t testing.TB, h Host, action string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(controlplane.RepoRoot(), "cluster", "lan", "ctl.sh"), h.Name, action).CombinedOutput() //nolint:gosec // the bed's own script
	if err != nil {
		t.Fatalf("cluster/lan/ctl.sh %s %s: %v\n%s", h.Name, action, err, out)
	}
}

func missing(t testing.TB, why string) {
	t.Helper()
	msg := "LAN TEST NOT RUN: " + why + "; start the bed with make lan-up and run the test through cluster/lan/exec.sh node"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
