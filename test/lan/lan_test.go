//go:build lan

package lan

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"

	"github.com/provider-kvm/provider-kvm/internal/host"
)

// lanHost is one libvirt host of the test bed, from $LAN_DIR/env.sh.
type lanHost struct {
	name, netns, ip, bridge, pool, poolDir, logDir, uuid string
}

// bed is the test bed as cluster/lan/up.sh described it in $LAN_DIR/env.sh.
type bed struct {
	dir, lanNetns, nodeNetns, nodeIP, subnet, leases string
	user                                             string
	key, knownHosts                                  []byte
	keyPath, knownHostsPath                          string
	hosts                                            []lanHost
}

// notRun skips the test with a loud message, or fails it when CI is set: a machine meant to
// run it must not pass by skipping.
func notRun(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := "LAN TEST NOT RUN: " + fmt.Sprintf(format, args...) +
		"; start the test bed with make lan-up and run make test-lan"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// requireLAN returns the test bed, or skips (fails under CI) when the LAN_* variables are
// missing or this process is not in netns node: every connection a test opens must start there.
func requireLAN(t testing.TB) *bed {
	t.Helper()
	for _, v := range []string{"LAN_DIR", "LAN_NETNS", "LAN_NODE_NETNS", "LAN_NODE_IP", "LAN_SUBNET", "LAN_DHCP_LEASES",
		"LAN_HOSTS", "LAN_SSH_KEY", "LAN_SSH_KNOWN_HOSTS"} {
		if os.Getenv(v) == "" {
			notRun(t, "environment variable %s is not set", v)
		}
	}
	if os.Geteuid() != 0 {
		notRun(t, "not root (the checks read other namespaces)")
	}
	b := &bed{
		dir: os.Getenv("LAN_DIR"), lanNetns: os.Getenv("LAN_NETNS"), nodeNetns: os.Getenv("LAN_NODE_NETNS"),
		nodeIP: os.Getenv("LAN_NODE_IP"), subnet: os.Getenv("LAN_SUBNET"), leases: os.Getenv("LAN_DHCP_LEASES"),
		user: os.Getenv("LAN_SSH_USER"), keyPath: os.Getenv("LAN_SSH_KEY"), knownHostsPath: os.Getenv("LAN_SSH_KNOWN_HOSTS"),
	}
	if b.user == "" {
		b.user = "root"
	}
	var self, ns syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &self); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat("/run/netns/"+b.nodeNetns, &ns); err != nil {
		notRun(t, "network namespace %s does not exist (%v)", b.nodeNetns, err)
	}
	if self.Ino != ns.Ino || self.Dev != ns.Dev {
		notRun(t, "this test process is not inside network namespace %s", b.nodeNetns)
	}
	var err error
	if b.key, err = os.ReadFile(b.keyPath); err != nil {
		t.Fatal(err)
	}
	if b.knownHosts, err = os.ReadFile(b.knownHostsPath); err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Fields(os.Getenv("LAN_HOSTS")) {
		v := "LAN_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_"
		h := lanHost{name: name, netns: os.Getenv(v + "NETNS"), ip: os.Getenv(v + "IP"), bridge: os.Getenv(v + "BRIDGE"),
			pool: os.Getenv(v + "POOL"), poolDir: os.Getenv(v + "POOL_DIR"), logDir: os.Getenv(v + "LOG_DIR"), uuid: os.Getenv(v + "UUID")}
		if h.ip == "" || h.pool == "" || h.uuid == "" || h.netns == "" {
			t.Fatalf("env.sh describes host %s incompletely (%+v): rerun make lan-up", name, h)
		}
		b.hosts = append(b.hosts, h)
	}
	if len(b.hosts) < 2 {
		t.Fatalf("LAN_HOSTS=%q: want two hosts", os.Getenv("LAN_HOSTS"))
	}
	return b
}

// sshArgs are OpenSSH's options for a host: our key only, the host key pinned by knownHosts,
// never ~/.ssh (StrictHostKeyChecking=yes, no global file).
func (b *bed) sshArgs(knownHosts, ip string) []string {
	return []string{"-q", "-i", b.keyPath, "-p", "22", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
		"-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + knownHosts, "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "ConnectTimeout=10", b.user + "@" + ip}
}

// ssh runs a shell command on h with OpenSSH (a session in h's namespaces), stdin from in.
func (b *bed) ssh(ctx context.Context, h lanHost, in io.Reader, command string) (string, error) {
	cmd := exec.CommandContext(ctx, "ssh", append(b.sshArgs(b.knownHostsPath, h.ip), command)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if in != nil {
		cmd.Stdin = in
	}
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("ssh %s %q: %w: %s", h.name, command, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// run runs a local command (still in netns node) and returns its output.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestSSHAcrossTheLAN: from node, OpenSSH and the provider's own transport (internal/host)
// reach each host on its LAN address with its pinned host key, the session comes from node's
// LAN address, and each host answers with its own libvirtd: hostname, host UUID and pool.
func TestSSHAcrossTheLAN(t *testing.T) {
	b := requireLAN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	pool := host.NewConnections()
	defer func() { _ = pool.Close() }()
	seenUUID := map[string]string{}
	for _, h := range b.hosts {
		t.Run(h.name, func(t *testing.T) {
			out, err := b.ssh(ctx, h, nil, `hostname; echo "$SSH_CONNECTION"; test -S /run/libvirt/libvirt-sock && echo socket;
				virsh -q -c qemu:///system pool-list --name`)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Fields(out)
			// hostname, then SSH_CONNECTION = client-ip client-port server-ip server-port
			if len(lines) < 6 || lines[0] != h.name || lines[1] != b.nodeIP || lines[3] != h.ip || lines[5] != "socket" {
				t.Fatalf("OpenSSH session on %s: got %q, want hostname %s, client %s, server %s and libvirt's socket", h.ip, out, h.name, b.nodeIP, h.ip)
			}
			if !slices.Contains(lines[6:], h.pool) {
				t.Errorf("virsh pool-list on %s: %q, want %s", h.name, lines[6:], h.pool)
			}
			t.Logf("OpenSSH %s@%s: hostname %s, session %s:%s -> %s:%s, pools %v", b.user, h.ip, lines[0], lines[1], lines[2], lines[3], lines[4], lines[6:])

			conn, err := pool.Get(ctx, host.Config{Host: h.ip, Port: 22, User: b.user, PrivateKey: b.key, KnownHosts: b.knownHosts})
			if err != nil {
				t.Fatalf("internal/host to %s: %v", h.ip, err)
			}
			var hostname, caps string
			var pools []string
			err = conn.Do(ctx, func(l *libvirt.Libvirt) error {
				var err error
				if hostname, err = l.ConnectGetHostname(); err != nil {
					return err
				}
				if caps, err = l.ConnectGetCapabilities(); err != nil {
					return err
				}
				ps, _, err := l.ConnectListAllStoragePools(1, 0)
				for _, p := range ps {
					pools = append(pools, p.Name)
				}
				return err
			})
			if err != nil {
				t.Fatalf("libvirt over internal/host on %s: %v", h.ip, err)
			}
			var c struct {
				Host struct {
					UUID string `xml:"uuid"`
				} `xml:"host"`
			}
			if err := xml.Unmarshal([]byte(caps), &c); err != nil {
				t.Fatal(err)
			}
			if hostname != h.name || c.Host.UUID != h.uuid || !slices.Contains(pools, h.pool) {
				t.Fatalf("libvirtd behind %s: hostname %q, host uuid %q, pools %v; want %q, %q, %s", h.ip, hostname, c.Host.UUID, pools, h.name, h.uuid, h.pool)
			}
			for _, o := range b.hosts {
				if o.name != h.name && slices.Contains(pools, o.pool) {
					t.Errorf("%s's libvirtd has %s's pool %s: the hosts share state", h.name, o.name, o.pool)
				}
			}
			if prev, ok := seenUUID[c.Host.UUID]; ok {
				t.Errorf("%s and %s report the same libvirt host UUID %s", prev, h.name, c.Host.UUID)
			}
			seenUUID[c.Host.UUID] = h.name
			t.Logf("internal/host %s: libvirt hostname %s, host uuid %s, pools %v", conn.Address(), hostname, c.Host.UUID, pools)
		})
	}
}

// TestHostKeysArePinned: a known_hosts that pins the other host's key for this address is
// refused, by OpenSSH and by internal/host: the check is real, not accept-anything.
func TestHostKeysArePinned(t *testing.T) {
	b := requireLAN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keyOf := map[string]string{} // ip -> "type base64"
	for _, line := range strings.Split(string(b.knownHosts), "\n") {
		if f := strings.Fields(line); len(f) >= 3 {
			keyOf[f[0]] = f[1] + " " + f[2]
		}
	}
	a, other := b.hosts[0], b.hosts[1]
	if keyOf[a.ip] == "" || keyOf[other.ip] == "" || keyOf[a.ip] == keyOf[other.ip] {
		t.Fatalf("known_hosts %s: want distinct keys for %s and %s, got %v", b.knownHostsPath, a.ip, other.ip, keyOf)
	}
	wrong := []byte(a.ip + " " + keyOf[other.ip] + "\n")
	path := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(path, wrong, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, "ssh", append(b.sshArgs(path, a.ip), "true")...).CombinedOutput()
	if err == nil {
		t.Fatalf("OpenSSH accepted %s with %s's host key pinned (%s)", a.name, other.name, out)
	}
	pool := host.NewConnections()
	defer func() { _ = pool.Close() }()
	if _, err := pool.Get(ctx, host.Config{Host: a.ip, Port: 22, User: b.user, PrivateKey: b.key, KnownHosts: wrong}); err == nil {
		t.Fatalf("internal/host accepted %s with %s's host key pinned", a.name, other.name)
	} else {
		t.Logf("wrong pin refused as expected: %v", err)
	}
}
