package scale

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/hostinspect"
	"github.com/provider-kvm/provider-kvm/test/support/lanbed"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// bedHost is one libvirt host the bench spreads its resources over.
type bedHost struct {
	name    string                        // how the report names it
	ref     *xpv2.ProviderConfigReference // its ClusterProviderConfig; nil: "default", which the one-host run uses
	config  string                        // that config's name
	base    string                        // its BaseImage's name in each namespace
	ssh     string                        // its sshd's address (ip:port), as ss and the provider's connection counter name it
	inspect *hostinspect.Host             // its libvirtd seen directly, to remove what a bounded cleanup left
	restart func(t *testing.T)            // restarts its libvirtd
}

// bed is where a run measures: its hosts, and how the report names the spread.
type bed struct {
	hosts []bedHost
	where string // "on one host", "over 2 hosts"
}

// requireBed checks that the bed the run asks for is there (skipping, or failing under CI, as
// its package does), before the control plane starts, and returns what makes the bed's hosts'
// ClusterProviderConfigs once it runs: the test bed's one host (SCALE_HOSTS unset), or the LAN
// bed's two (SCALE_HOSTS=lan; the test then runs inside netns node).
func requireBed(t *testing.T, lan bool) func(*controlplane.Env) bed {
	t.Helper()
	if lan {
		l := lanbed.Require(t)
		return func(env *controlplane.Env) bed { return lanHosts(t, env, l) }
	}
	tb := testbed.Require(t)
	return func(env *controlplane.Env) bed { return testbedHost(t, env, tb) }
}

// testbedHost is the test bed's one host behind ClusterProviderConfig "default", which the
// managed resources use without naming it.
func testbedHost(t *testing.T, env *controlplane.Env, tb *testbed.Env) bed {
	env.HostConfig(t, tb, "default")
	return bed{where: "on one host", hosts: []bedHost{{
		name: "testbed", config: "default", base: "base", ssh: net.JoinHostPort(tb.SSHHost, strconv.Itoa(tb.SSHPort)),
		inspect: &hostinspect.Host{Name: "testbed", Socket: tb.LibvirtSocket, URI: "qemu:///system", Pool: tb.Pool, PoolDir: tb.PoolDir},
		restart: func(t *testing.T) { tb.Control(t, "restart-libvirtd") },
	}}}
}

// lanHosts are the LAN bed's hosts, one ClusterProviderConfig each (named after the host, with
// its pool and bridge), reached across the LAN from netns node.
func lanHosts(t *testing.T, env *controlplane.Env, l *lanbed.Env) bed {
	ctx := context.Background()
	env.Namespace(t, "crossplane-system")
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "crossplane-system", Name: "lan-ssh"},
		Data: map[string][]byte{"ssh-privatekey": readFile(t, l.KeyFile), "known_hosts": readFile(t, l.KnownHostsFile)}}
	if err := env.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	sel := func(key string) v1alpha1.SecretKeySelector {
		return v1alpha1.SecretKeySelector{Namespace: "crossplane-system", Name: "lan-ssh", Key: key}
	}
	b := bed{where: fmt.Sprintf("over %d hosts", len(l.Hosts))}
	for _, h := range l.Hosts {
		cpc := &v1alpha1.ClusterProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: h.Name}, Spec: v1alpha1.ProviderConfigSpec{
			Transport: v1alpha1.TransportSSH, Host: h.IP, Port: int32(l.SSHPort), User: l.User,
			Credentials: &v1alpha1.SSHCredentials{SecretRef: sel("ssh-privatekey")}, KnownHosts: &v1alpha1.KnownHosts{SecretRef: sel("known_hosts")},
			LibvirtSocket: l.Socket, URI: "qemu:///system",
			Defaults: v1alpha1.HostDefaults{DomainType: v1alpha1.DomainTypeQEMU, Pool: h.Pool, Bridge: h.Bridge},
		}}
		if err := env.Client.Create(ctx, cpc); err != nil {
			t.Fatal(err)
		}
		b.hosts = append(b.hosts, bedHost{
			name: h.Name, config: h.Name, base: "base-" + h.Name, ssh: net.JoinHostPort(h.IP, strconv.Itoa(l.SSHPort)),
			ref:     &xpv2.ProviderConfigReference{Kind: v1alpha1.ClusterProviderConfigKind, Name: h.Name},
			inspect: l.Inspect(h),
			restart: func(t *testing.T) { l.Control(t, h, "stop-libvirtd"); l.Control(t, h, "start-libvirtd") },
		})
	}
	return b
}

// prepare lets every host's config download from the image server and raises its allocation
// ratios: a thousand defined domains of 1 vCPU and 128 MiB commit far more than the bed's two
// CPUs, and stopped domains count.
func (b bed) prepare(t *testing.T, env *controlplane.Env, imageServer string) {
	t.Helper()
	ctx := context.Background()
	for _, h := range b.hosts {
		env.AllowImageServer(t, h.config, imageServer)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cpc := &v1alpha1.ClusterProviderConfig{}
			if err := env.Client.Get(ctx, types.NamespacedName{Name: h.config}, cpc); err != nil {
				return err
			}
			cpc.Spec.Allocation = &v1alpha1.AllocationRatios{CPU: ptr.To(resource.MustParse("1024")), Memory: ptr.To(resource.MustParse("64"))}
			return env.Client.Update(ctx, cpc)
		})
		if err != nil {
			t.Fatalf("raising %s's allocation ratios: %v", h.config, err)
		}
	}
}

// bases are the BaseImages the bed holds: one per host in each namespace, as placement would
// make them (a domain boots an image of its own host).
func (b bed) bases() int { return namespaces * len(b.hosts) }

// hostOf is the index of the host the i-th KVMDomain and its seed go to, of n: the namespaces
// take turns and each block of them starts one host further, so every namespace uses every
// host and any even count splits evenly over two.
func hostOf(i, n int) int { return (i%namespaces + i/namespaces) % n }

// baseImage is the BaseImage of h in namespace ns, pulling the image at url with sha256 sum.
func (h bedHost) baseImage(ns, url, sum string) *v1alpha1.BaseImage {
	bi := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: h.base}, Spec: v1alpha1.BaseImageSpec{
		ForProvider: v1alpha1.BaseImageParameters{Format: v1alpha1.ImageFormatRaw, Source: v1alpha1.ImageSource{URL: url, SHA256: sum}}}}
	bi.Spec.ProviderConfigReference = h.ref
	return bi
}

// pair is the i-th SeedVolume and the KVMDomain that boots from it and its namespace's base of
// the same host.
func (b bed) pair(i int) []client.Object {
	h := b.hosts[hostOf(i, len(b.hosts))]
	ns, name := nsName(i), fmt.Sprintf("d%04d", i)
	sv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.SeedVolumeSpec{
		ForProvider: v1alpha1.SeedVolumeParameters{Hostname: name, UserData: ptr.To("#cloud-config\n")}}}
	d := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.KVMDomainSpec{
		ForProvider: v1alpha1.KVMDomainParameters{VCPU: 1, MemoryMiB: 128, PowerState: v1alpha1.PowerStateStopped,
			BaseImageRef:  &xpv2.NamespacedReference{Name: h.base},
			SeedVolumeRef: &xpv2.NamespacedReference{Name: name}}}}
	sv.Spec.ProviderConfigReference, d.Spec.ProviderConfigReference = h.ref, h.ref
	return []client.Object{sv, d}
}

// peers are the hosts' sshd addresses, in the bed's order.
func (b bed) peers() []string {
	out := make([]string, len(b.hosts))
	for i, h := range b.hosts {
		out[i] = h.ssh
	}
	return out
}

// names are the hosts' names, in the bed's order.
func (b bed) names() []string {
	out := make([]string, len(b.hosts))
	for i, h := range b.hosts {
		out[i] = h.name
	}
	return out
}

// cleanup deletes the run's resources, KVMDomains first, and waits until they are gone, so the
// shared bed is left as it was, for at most bound in all. What is still there then is removed
// from the hosts directly (the provider stopped first, so that it makes nothing again): deleting
// a thousand resources waits on the global reconcile rate behind their polls (performance.md).
// Running past bound is an error when strict (the short run of make test), a note otherwise.
func (b bed) cleanup(t *testing.T, kube client.Client, bound time.Duration, stop func(), strict bool, digest string) {
	ctx := context.Background()
	deadline := time.Now().Add(bound)
	err := deleteAll(ctx, kube, deadline)
	if err == nil {
		return
	}
	report := t.Logf
	if strict {
		report = t.Errorf
	}
	report("cleanup through Kubernetes did not finish within %s (%v): removing what is left from the hosts directly", bound, err)
	stop()
	for _, h := range b.hosts {
		removed, errs := removeLeftovers(h.inspect, digest)
		t.Logf("removed from %s directly: %d objects", h.name, removed)
		for _, e := range errs {
			t.Errorf("cleanup on %s: %v", h.name, e)
		}
	}
}

// deleteAll deletes the bench's KVMDomains, then SeedVolumes, then BaseImages, each kind gone
// before the next, until deadline.
func deleteAll(ctx context.Context, kube client.Client, deadline time.Time) error {
	for _, kind := range []struct {
		obj  client.Object
		list client.ObjectList
		name string
	}{
		{&v1alpha1.KVMDomain{}, &v1alpha1.KVMDomainList{}, "KVMDomains"},
		{&v1alpha1.SeedVolume{}, &v1alpha1.SeedVolumeList{}, "SeedVolumes"},
		{&v1alpha1.BaseImage{}, &v1alpha1.BaseImageList{}, "BaseImages"},
	} {
		for i := range namespaces {
			if err := kube.DeleteAllOf(ctx, kind.obj, client.InNamespace(nsName(i))); err != nil {
				return fmt.Errorf("deleting the bench's %s in %s: %w", kind.name, nsName(i), err)
			}
		}
		if err := waitGone(ctx, kube, kind.list, kind.name, deadline); err != nil {
			return err
		}
	}
	return nil
}

// waitGone waits until list is empty, or deadline.
func waitGone(ctx context.Context, kube client.Client, list client.ObjectList, name string, deadline time.Time) error {
	for {
		err := kube.List(ctx, list)
		if err == nil {
			n := meta.LenList(list)
			if n == 0 {
				return nil
			}
			err = fmt.Errorf("%d %s left", n, name)
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

// removeLeftovers removes from h what the bench left there: domains, volumes and NVRAM files
// of its namespaces, and its image's data, marker, claim and owner volumes.
func removeLeftovers(h *hostinspect.Host, digest string) (int, []error) {
	defer h.Close()
	objs, err := h.Matching(hostinspect.InNamespaces(nsNames()), func(v string) bool {
		return strings.HasPrefix(v, imagecache.NamePrefix+digest)
	})
	if err != nil {
		return 0, []error{fmt.Errorf("listing the bench's objects: %w", err)}
	}
	errs := h.Remove(objs)
	left, err := h.Present(objs)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("listing what is left: %w", err))
	case len(left) > 0:
		errs = append(errs, fmt.Errorf("still there after removal: %s", hostinspect.List(left)))
	}
	return len(objs), errs
}

// readFile is a file of the bed, e.g. its SSH key.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the bed's %s: %v", path, err)
	}
	return b
}

// nsNames are the bench's namespaces.
func nsNames() []string {
	out := make([]string, namespaces)
	for i := range out {
		out[i] = nsName(i)
	}
	return out
}

func TestHostOf(t *testing.T) {
	cases := map[string]struct {
		n, hosts int
		want     []int // KVMDomains per host
	}{
		"OneHost":       {n: 50, hosts: 1, want: []int{50}},
		"FiftyOverTwo":  {n: 50, hosts: 2, want: []int{25, 25}},
		"FiveHundred":   {n: 500, hosts: 2, want: []int{250, 250}},
		"AThousand":     {n: 1000, hosts: 2, want: []int{500, 500}},
		"ThirtyOverTwo": {n: 30, hosts: 2, want: []int{15, 15}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := make([]int, tc.hosts)
			perNamespace := map[string]map[int]bool{}
			for i := range tc.n {
				h := hostOf(i, tc.hosts)
				got[h]++
				if perNamespace[nsName(i)] == nil {
					perNamespace[nsName(i)] = map[int]bool{}
				}
				perNamespace[nsName(i)][h] = true
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("KVMDomains per host (-want +got):\n%s", diff)
			}
			if tc.n >= 2*namespaces {
				for ns, hs := range perNamespace {
					if len(hs) != tc.hosts {
						t.Errorf("namespace %s uses %d of %d hosts", ns, len(hs), tc.hosts)
					}
				}
			}
		})
	}
}

func TestScanBound(t *testing.T) {
	cases := map[string]struct {
		minutes float64
		poll    time.Duration
		hosts   int
		want    float64
	}{
		"ShortRunOneHost": {minutes: 40.0 / 60, poll: 15 * time.Second, hosts: 1, want: 4 * (3 + 2)},
		"FullRunOneHost":  {minutes: 2, poll: time.Minute, hosts: 1, want: 4 * (2 + 2)},
		"FullRunTwoHosts": {minutes: 2, poll: time.Minute, hosts: 2, want: 8 * (2 + 2)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, scanBound(tc.minutes, tc.poll, tc.hosts)); diff != "" {
				t.Errorf("scanBound (-want +got):\n%s", diff)
			}
		})
	}
}
