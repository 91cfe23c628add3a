//go:build lan

package lan

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The guest's cloud-init seed, as cluster/testbed/boot-check.sh makes it: squid configured
// (the LAN is in Debian's localnet ACL), qemu-guest-agent started, squid enabled.
const (
	userData = `#cloud-config
manage_etc_hosts: true
chpasswd:
  expire: false
  users:
    - {name: root, password: testbed, type: text}
write_files:
  - path: /etc/squid/conf.d/testbed.conf
    content: |
      http_access allow localnet
      visible_hostname lan-squid
`
	vendorData = `#!/bin/sh
systemctl start qemu-guest-agent.service
systemctl enable --now squid.service
`
)

// guestXML is boot-check.sh's q35/UEFI domain (type qemu: TCG), its NIC on the host's bridge.
func guestXML(vm, pool, rootVol, seedVol, bridge, mac string) string {
	return fmt.Sprintf(`<domain type='qemu'>
  <name>%[1]s</name>
  <memory unit='MiB'>1024</memory>
  <vcpu>2</vcpu>
  <os firmware='efi'>
    <type arch='x86_64' machine='q35'>hvm</type>
    <firmware><feature enabled='no' name='secure-boot'/><feature enabled='no' name='enrolled-keys'/></firmware>
    <boot dev='hd'/>
  </os>
  <features><acpi/><apic/></features>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='volume' device='disk'>
      <driver name='qemu' type='qcow2' discard='unmap'/>
      <source pool='%[2]s' volume='%[3]s'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <controller type='scsi' model='virtio-scsi'/>
    <disk type='volume' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source pool='%[2]s' volume='%[4]s'/>
      <target dev='sda' bus='scsi'/>
      <readonly/>
    </disk>
    <interface type='bridge'>
      <source bridge='%[5]s'/>
      <mac address='%[6]s'/>
      <model type='virtio'/>
    </interface>
    <channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
    <serial type='pty'>
      <log file='/var/log/libvirt/qemu/%[1]s-console.log' append='off'/>
      <target port='0'/>
    </serial>
    <console type='pty'><target type='serial' port='0'/></console>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
  </devices>
</domain>
`, vm, pool, rootVol, seedVol, bridge, mac)
}

// lease returns the address dnsmasq leased to mac ("" if none yet); lines are
// "expiry mac ip hostname client-id".
func lease(path, mac string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fs := strings.Fields(s.Text()); len(fs) >= 3 && strings.EqualFold(fs[1], mac) {
			return fs[2]
		}
	}
	return ""
}

// TestGuestOnHostBridge boots the test bed's guest image on host-a (everything over SSH from
// node: volumes uploaded through the session, the domain defined and started with virsh on the
// host), its NIC on host-a's bridge br0. The guest gets its address from the LAN's dnsmasq and
// its squid answers 204 to node, proxying to a 204 origin on node's LAN address: the origin
// sees the guest's LAN address, so the request went node -> guest -> node over the LAN.
// Run it under flock /tmp/lan.lock (make test-lan does): a TCG boot takes 1-3 minutes.
func TestGuestOnHostBridge(t *testing.T) {
	b := requireLAN(t)
	h := b.hosts[0]
	image := os.Getenv("TESTBED_IMAGE")
	if image == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			cache = filepath.Join(os.Getenv("HOME"), ".cache")
		}
		image = filepath.Join(cache, "provider-kvm", "images", "debian-12-testbed.qcow2")
	}
	img, err := os.Stat(image)
	if err != nil {
		notRun(t, "no guest image at %s (build it with make image)", image)
	}
	if _, err := exec.LookPath("genisoimage"); err != nil {
		notRun(t, "genisoimage missing (make packages)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	var rb [2]byte
	_, _ = rand.Read(rb[:])
	vm := fmt.Sprintf("lantest-%d-%d", time.Now().Unix(), os.Getpid())
	mac := fmt.Sprintf("52:54:00:77:%02x:%02x", rb[0], rb[1])
	baseVol, rootVol, seedVol := vm+"-base.qcow2", vm+"-root.qcow2", vm+"-seed.iso"
	consoleLog := filepath.Join(h.logDir, "qemu", vm+"-console.log")
	virsh := "virsh -q -c qemu:///system "
	sh := func(in io.Reader, command string) string {
		t.Helper()
		out, err := b.ssh(ctx, h, in, command)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	ok := false
	t.Cleanup(func() {
		if !ok {
			if out, err := exec.Command("tail", "-n", "30", consoleLog).CombinedOutput(); err == nil {
				t.Logf("console tail (%s):\n%s", consoleLog, out)
			}
		}
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := b.ssh(c, h, nil, fmt.Sprintf(`%[1]s destroy %[2]s >/dev/null 2>&1; %[1]s undefine --nvram %[2]s >/dev/null 2>&1
			for v in %[4]s %[5]s %[6]s; do %[1]s vol-delete --pool %[3]s "$v" >/dev/null 2>&1; done
			rm -f /var/log/libvirt/qemu/%[2]s-console.log /var/log/libvirt/qemu/%[2]s.log
			%[1]s list --all --name; %[1]s vol-list --pool %[3]s`, virsh, vm, h.pool, rootVol, seedVol, baseVol))
		if err != nil {
			t.Errorf("cleanup on %s: %v", h.name, err)
		} else if strings.Contains(out, vm) {
			t.Errorf("cleanup on %s left: %s", h.name, out)
		}
	})

	// --- volumes: the image and the seed travel over the SSH session (stdin), as to a remote host
	t0 := time.Now()
	f, err := os.Open(image)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sh(nil, fmt.Sprintf("%s vol-create-as %s %s %d --format raw >/dev/null", virsh, h.pool, baseVol, img.Size()))
	sh(f, fmt.Sprintf("%s vol-upload --pool %s %s /dev/stdin", virsh, h.pool, baseVol))
	basePath := sh(nil, fmt.Sprintf("%s vol-path --pool %s %s", virsh, h.pool, baseVol))
	sh(nil, fmt.Sprintf("%s vol-create-as %s %s 4G --format qcow2 --backing-vol %s --backing-vol-format qcow2 >/dev/null", virsh, h.pool, rootVol, basePath))
	upload := time.Since(t0)

	dir := t.TempDir()
	for name, content := range map[string]string{
		"meta-data":   "instance-id: " + vm + "\nlocal-hostname: " + vm + "\n",
		"user-data":   userData,
		"vendor-data": vendorData,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	iso := filepath.Join(dir, "seed.iso")
	run(t, "genisoimage", "-quiet", "-output", iso, "-volid", "cidata", "-joliet", "-rock",
		filepath.Join(dir, "user-data"), filepath.Join(dir, "meta-data"), filepath.Join(dir, "vendor-data"))
	seed, err := os.ReadFile(iso)
	if err != nil {
		t.Fatal(err)
	}
	sh(nil, fmt.Sprintf("%s vol-create-as %s %s %d --format raw >/dev/null", virsh, h.pool, seedVol, len(seed)))
	sh(bytes.NewReader(seed), fmt.Sprintf("%s vol-upload --pool %s %s /dev/stdin", virsh, h.pool, seedVol))
	sh(strings.NewReader(guestXML(vm, h.pool, rootVol, seedVol, h.bridge, mac)), virsh+"define /dev/stdin >/dev/null")
	t.Logf("%s on %s: image %d B uploaded over SSH + overlay in %.1fs, seed and domain in %.1fs; mac %s on %s",
		vm, h.name, img.Size(), upload.Seconds(), time.Since(t0).Seconds()-upload.Seconds(), mac, h.bridge)

	// --- the 204 origin on node's LAN address; it records who asked
	ln, err := net.Listen("tcp", net.JoinHostPort(b.nodeIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var askers []string
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		askers = append(askers, host)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	origin := "http://" + ln.Addr().String() + "/"

	// --- boot and wait: lease, then squid's 204
	start := time.Now()
	sh(nil, virsh+"start "+vm+" >/dev/null")
	var ip string
	var tLease, t204 time.Duration
	for i := 0; ; i++ {
		if ctx.Err() != nil || time.Since(start) > 9*time.Minute {
			t.Fatalf("no 204 through the guest after %.0fs (lease %q after %.1fs)", time.Since(start).Seconds(), ip, tLease.Seconds())
		}
		if ip == "" {
			if ip = lease(b.leases, mac); ip != "" {
				tLease = time.Since(start)
				t.Logf("  %.1fs lease %s for %s from the LAN's dnsmasq", tLease.Seconds(), ip, mac)
			}
		}
		if ip != "" {
			px, _ := url.Parse("http://" + net.JoinHostPort(ip, "3128"))
			c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(px)}}
			if resp, err := c.Get(origin); err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusNoContent {
					t204 = time.Since(start)
					break
				}
			}
		}
		if i%10 == 9 {
			if st := sh(nil, virsh+"domstate "+vm); st != "running" {
				t.Fatalf("domain %s is %q", vm, st)
			}
		}
		time.Sleep(time.Second)
	}
	t.Logf("  %.1fs squid on %s:3128 answered 204 from %s", t204.Seconds(), ip, origin)

	// --- where it all went: the lease range, the origin's peer, the guest's tap on br0
	lo, hi := net.ParseIP(strings.Split(os.Getenv("LAN_DHCP_RANGE"), "-")[0]), net.ParseIP(strings.Split(os.Getenv("LAN_DHCP_RANGE"), "-")[1])
	if g := net.ParseIP(ip).To4(); g == nil || lo == nil || hi == nil || bytes.Compare(g, lo.To4()) < 0 || bytes.Compare(g, hi.To4()) > 0 {
		t.Errorf("lease %s is outside the DHCP range %s", ip, os.Getenv("LAN_DHCP_RANGE"))
	}
	mu.Lock()
	got := append([]string(nil), askers...)
	mu.Unlock()
	if len(got) == 0 || got[len(got)-1] != ip {
		t.Errorf("the origin was asked by %v, want the guest's LAN address %s", got, ip)
	}
	var taps []struct {
		Name string `json:"ifname"`
	}
	if err := json.Unmarshal([]byte(run(t, "ip", "-n", h.netns, "-j", "link", "show", "master", h.bridge)), &taps); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tp := range taps {
		names = append(names, tp.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "vnet") {
		t.Errorf("%s's %s has ports %v: no guest tap", h.name, h.bridge, names)
	}
	ok = true
	t.Logf("TIMING lan guest on %s: upload+overlay %.1fs, start->lease %.1fs, start->204 %.1fs (bridge %s ports %v)",
		h.name, upload.Seconds(), tLease.Seconds(), t204.Seconds(), h.bridge, names)
}
