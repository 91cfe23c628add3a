package kvmdomain

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/consoletail"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// messages records the events' reasons and messages.
type messages struct{ got []string }

func (r *messages) Event(_ runtime.Object, e event.Event) {
	r.got = append(r.got, string(e.Reason)+": "+e.Message)
}
func (r *messages) WithAnnotations(...string) event.Recorder { return r }

func TestConsoleLogFor(t *testing.T) {
	dir := libvirt.Pool{Name: "p", Type: "dir", Path: "/pool/p"}
	cases := map[string]struct {
		reason  string
		inPool  bool
		p       libvirt.Pool
		want    string
		readVol string // the volume consoleVolume finds for want; "": none
	}{
		"Default": {reason: "Without the flag, libvirt's log directory, which is not read.", p: dir,
			want: "/var/log/libvirt/qemu/ns_vm-console.log"},
		"InDirPool": {reason: "With the flag, the pool's directory: readable as a volume.", inPool: true, p: dir,
			want: "/pool/p/ns_vm.console.log", readVol: "ns_vm.console.log"},
		"LogicalPool": {reason: "A pool that is not a directory cannot hold a log file.", inPool: true,
			p: libvirt.Pool{Name: "lv", Type: "logical", Path: "/dev/vg"}, want: "/var/log/libvirt/qemu/ns_vm-console.log"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := consoleLogFor(tc.inPool, tc.p, "ns_vm")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nconsoleLogFor: -want, +got:\n%s", tc.reason, diff)
			}
			vol, _ := consoleVolume(tc.p, got, "ns_vm")
			if diff := cmp.Diff(tc.readVol, vol); diff != "" {
				t.Errorf("%s\nconsoleVolume: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
	// Another domain's log in the same pool is never read as this one's.
	if vol, ok := consoleVolume(dir, "/pool/p/ns_other.console.log", "ns_vm"); ok {
		t.Errorf("consoleVolume read another domain's log: %q", vol)
	}
}

func TestShowConsoleTail(t *testing.T) {
	const secret = "http_access allow team-secret-acl"
	seed := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "vm-seed"}}
	seed.Spec.ForProvider.UserDataSecretRef = &v1alpha1.LocalSecretKeySelector{Name: "ud", Key: "user-data"}
	ud := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ud"},
		Data: map[string][]byte{"user-data": []byte("#cloud-config\nwrite_files:\n- content: |\n    " + secret + "\n")}}
	// A console log longer than what is read, ending with a line that echoes the user-data.
	log := strings.Repeat("early boot noise\n", 2000) + "[  OK  ] Started squid\n" +
		"Failed loading yaml blob: " + secret + "\n" + "debian login: "

	cases := map[string]struct {
		reason      string
		notReadyFor time.Duration
		logPath     string
		want        []string
	}{
		"TooEarly": {
			reason:      "A guest not Ready for less than ConsoleTailAfter shows nothing.",
			notReadyFor: ConsoleTailAfter - time.Minute,
			logPath:     "/pool/default/" + ourDomain + consoleLogSuffix,
		},
		"LoggedOutsideThePool": {
			reason:      "A console logged in libvirt's log directory cannot be read: nothing is shown.",
			notReadyFor: ConsoleTailAfter + time.Minute,
			logPath:     "/var/log/libvirt/qemu/" + ourDomain + "-console.log",
		},
		"Shown": {
			reason:      "A guest stuck past the bound: one event with the end of its console, the line echoing the user-data withheld.",
			notReadyFor: ConsoleTailAfter + time.Minute,
			logPath:     "/pool/default/" + ourDomain + consoleLogSuffix,
			want: []string{"GuestNotReady: not Ready for 6m0s; the end of the guest's serial console (lines that may carry a secret withheld):\n" +
				strings.Repeat("early boot noise\n", 40) + "[  OK  ] Started squid\n[line withheld: it may carry a secret]\ndebian login:"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost()
			h.Put(pool, ourDomain+consoleLogSuffix, []byte(log))
			s := runtime.NewScheme()
			_ = v1alpha1.SchemeBuilder.AddToScheme(s)
			_ = corev1.AddToScheme(s)
			e := newExt(h, false)
			e.kube = fake.NewClientBuilder().WithScheme(s).WithObjects([]client.Object{seed, ud}...).Build()
			rec := &messages{}
			e.recorder, e.tails = rec, newConsoleTails()
			cr := &v1alpha1.KVMDomain{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "vm", UID: types.UID(uid)}}
			cr.Spec.ForProvider.SeedVolumeName = ptr.To("vm-seed")
			c := xpv2.Unavailable().WithMessage("readiness probe failing")
			c.LastTransitionTime = metav1.NewTime(time.Now().Add(-tc.notReadyFor))
			cr.SetConditions(c)
			d := libvirt.DomainInfo{Name: ourDomain, State: libvirt.StateRunning,
				XML: `<domain type="kvm"><name>` + ourDomain + `</name><devices><serial type="pty"><log file="` + tc.logPath + `" append="on"/><target port="0"/></serial></devices></domain>`}
			tg := target{domain: ourDomain, pool: pool}

			e.showConsoleTail(context.Background(), cr, tg, d)
			e.showConsoleTail(context.Background(), cr, tg, d) // at most one per consoleTailEvery
			if diff := cmp.Diff(tc.want, rec.got); diff != "" {
				t.Errorf("%s\nevents: -want, +got:\n%s", tc.reason, diff)
			}
			for _, m := range rec.got {
				if strings.Contains(m, "team-secret-acl") {
					t.Errorf("an event shows the seed's secret: %q", m)
				}
				if len(m) > consoletail.MaxBytes+200 {
					t.Errorf("an event is %d bytes, beyond the tail's bound and its header", len(m))
				}
			}
		})
	}
}
