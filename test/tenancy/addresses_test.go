package tenancy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
)

// guestImage is the test bed's bootable guest image (cluster/testbed/image.sh) and its sha256.
func guestImage(t *testing.T) (string, string) {
	t.Helper()
	p := os.Getenv("TESTBED_IMAGE")
	if p == "" {
		p = os.Getenv("HOME") + "/.cache/provider-kvm/images/debian-12-testbed.qcow2"
	}
	f, err := os.Open(p)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the guest image is missing (make testbed-image): %v", err)
		}
		t.Skipf("the guest image is missing (make testbed-image): %v", err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return p, hex.EncodeToString(h.Sum(nil))
}

// TestGuestReportedAddressOutsideItsNetwork: team-b's guest claims an address outside the
// network it is attached to (here another team's range, 10.99.0.5, put in place of its DHCP
// address once it booted; on the bridge libvirt has no lease for it). The guest agent and ARP report it; the provider never uses it: no probe
// runs, status.atProvider.ipv4 (and so a Proxy's EndpointSlice) stays empty, the condition and an
// event say why. Once the platform states a range that holds it, the same address is used.
func TestGuestReportedAddressOutsideItsNetwork(t *testing.T) {
	b := startBed(t, 2*time.Second)
	image, sum := guestImage(t)
	b.serve(t, image, sum)
	ctx := context.Background()
	kube := b.kube
	b.env.Namespace(t, teamB)

	// The guest sits on the NAT network's bridge itself, so libvirt has no lease for it: its
	// address comes from the guest agent or ARP only. The platform grants the bridge with the
	// NAT network's subnet as its range.
	netXML := virsh(t, "net-dumpxml", b.tb.Net)
	br := regexp.MustCompile(`<bridge name='([^']+)'`).FindStringSubmatch(netXML)
	ip := regexp.MustCompile(`<ip address='([0-9.]+)' netmask='255\.255\.255\.0'`).FindStringSubmatch(netXML)
	if br == nil || ip == nil {
		t.Fatalf("cannot read the bridge and the /24 of network %s:\n%s", b.tb.Net, netXML)
	}
	subnet := ip[1][:strings.LastIndex(ip[1], ".")] + ".0/24"
	grant := func(cidrs ...string) {
		b.updateConfig(t, "default", func(cpc *v1alpha1.ClusterProviderConfig) {
			cpc.Spec.Attachments = []v1alpha1.AttachmentGrant{{Bridges: []v1alpha1.HostBridge{{Name: br[1], CIDRs: cidrs}}}}
		})
	}
	grant(subnet)

	base := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "debian"}, Spec: v1alpha1.BaseImageSpec{
		ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: b.imageURL, SHA256: b.sum}}}}
	seed := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "liar"}, Spec: v1alpha1.SeedVolumeSpec{
		ForProvider: v1alpha1.SeedVolumeParameters{Hostname: "liar",
			// The guest takes its DHCP address first (inside the range, used), then replaces it.
			UserData: ptr.To("#cloud-config\nruncmd:\n- [sh, -c, 'for i in $(ls /sys/class/net | grep -v lo); do ip -4 addr flush dev $i; ip addr add 10.99.0.5/24 dev $i; done']\n")}}}
	vm := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "liar"}, Spec: v1alpha1.KVMDomainSpec{
		ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 512, PowerState: v1alpha1.PowerStateRunning, Bridge: br[1],
			BaseImageName: ptr.To("debian"), SeedVolumeName: ptr.To("liar"),
			ReadinessProbe: &v1alpha1.ReadinessProbe{TCP: &v1alpha1.TCPProbe{Port: 22}, TimeoutSeconds: 2}}}}
	for _, o := range []client.Object{base, seed, vm} {
		if err := kube.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { gone(t, kube, vm, seed, base) })

	const ignored = "reported an address outside the ranges of bridge"
	controlplane.Eventually(t, 8*time.Minute, "the guest's own address ignored", func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			return err
		}
		if at := vm.Status.AtProvider; at.IPv4 == "10.99.0.5" {
			t.Fatalf("a guest-reported address outside the bridge's range was used: ipv4 %q, probe %q", at.IPv4, at.Probe)
		}
		if m := vm.GetCondition(xpv2.TypeReady).Message; !strings.Contains(m, ignored) {
			return fmt.Errorf("state %q, Ready %q, Synced %q", vm.Status.AtProvider.State, m, vm.GetCondition(xpv2.TypeSynced).Message)
		}
		return nil
	})
	if strings.Contains(vm.GetCondition(xpv2.TypeReady).Message, "10.99.0.5") {
		t.Errorf("the ignored address is in status: %q", vm.GetCondition(xpv2.TypeReady).Message)
	}
	b.event(t, vm, "ignored 10.99.0.5: ")
	// A few more polls: still never used.
	for range 5 {
		time.Sleep(2 * time.Second)
		if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			t.Fatal(err)
		}
		if at := vm.Status.AtProvider; at.IPv4 == "10.99.0.5" || (at.IPv4 == "" && at.Probe != "") {
			t.Fatalf("a guest-reported address outside the bridge's range was used: ipv4 %q, probe %q", at.IPv4, at.Probe)
		}
	}

	// The platform states the range: the same address is used now (the check, not the guest,
	// kept it out before).
	grant(subnet, "10.99.0.0/24")
	controlplane.Eventually(t, 2*time.Minute, "the address used once its range is stated", func() error {
		if err := kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			return err
		}
		if vm.Status.AtProvider.IPv4 != "10.99.0.5" {
			return fmt.Errorf("ipv4 %q, Ready %q", vm.Status.AtProvider.IPv4, vm.GetCondition(xpv2.TypeReady).Message)
		}
		return nil
	})
}
