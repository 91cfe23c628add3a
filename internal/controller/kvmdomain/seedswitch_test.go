package kvmdomain

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"libvirt.org/go/libvirtxml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/names"
)

// swapSeed is what libvirt does with a changed cdrom medium: the seed cdrom of domain XML x
// gets the source of diskXML.
func swapSeed(x, diskXML string) string {
	d := &libvirtxml.Domain{}
	disk := &libvirtxml.DomainDisk{}
	if d.Unmarshal(x) != nil || disk.Unmarshal(diskXML) != nil || d.Devices == nil {
		return x
	}
	for i := range d.Devices.Disks {
		if d.Devices.Disks[i].Device == "cdrom" {
			d.Devices.Disks[i].Source = disk.Source
		}
	}
	out, err := d.Marshal()
	if err != nil {
		return x
	}
	return out
}

// A changed seed is published as a new volume; once that is Ready the KVMDomain points its
// cdrom at it: the definition, and a running domain's medium.
func TestSeedSwitch(t *testing.T) {
	const seedUID = "5eed0000-1111-2222-3333-444455556666"
	sum := strings.Repeat("5e", 32)
	legacy := names.SeedVolume("team-a", "seed", seedUID)
	current := names.SeedContent("team-a", "seed", seedUID, sum)
	baseVol := "pkvm-base-old.qcow2"
	withSeed := func(d *v1alpha1.KVMDomain) { d.Spec.ForProvider.SeedVolumeName = ptr.To("seed") }
	seedObj := func(vol string, ready bool) *v1alpha1.SeedVolume {
		sv := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "seed", UID: seedUID}}
		sv.Status.AtProvider.VolumeName, sv.Status.AtProvider.ISOSHA256, sv.Status.AtProvider.Pool = vol, sum, pool
		if ready {
			sv.SetConditions(xpv2.Available())
		} else {
			sv.SetConditions(xpv2.Creating())
		}
		return sv
	}
	base := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "base"}}
	base.SetConditions(xpv2.Available())
	base.Status.AtProvider.Path, base.Status.AtProvider.VolumeName = "/pool/default/pkvm-base-new.qcow2", "pkvm-base-new.qcow2"

	type want struct {
		UpToDate      bool
		Calls         []string
		Defined, Live string // the seed volume of the definition and of the running domain
		BaseVolume    string // what the ownership mark says the overlay backs onto
	}
	cases := map[string]struct {
		reason string
		state  string
		seed   *v1alpha1.SeedVolume
		want   want
	}{
		"RunningSwitches": {
			reason: "a running domain is redefined and gets the new medium at once; the mark keeps the base it was made from",
			state:  libvirt.StateRunning, seed: seedObj(current, true),
			want: want{Calls: []string{"DefineDomain", "ChangeMedia " + ourDomain}, Defined: current, Live: current, BaseVolume: baseVol},
		},
		"ShutOffRedefined": {
			reason: "a shut-off domain is only redefined: it reads the new seed when it starts",
			state:  libvirt.StateShutOff, seed: seedObj(current, true),
			want: want{Calls: []string{"DefineDomain", "StartDomain " + ourDomain}, Defined: current, Live: current, BaseVolume: baseVol},
		},
		"NotReadyYet": {
			reason: "a seed whose new content is not verified yet is not switched to",
			state:  libvirt.StateRunning, seed: seedObj(current, false),
			want: want{UpToDate: true, Defined: legacy, Live: legacy, BaseVolume: baseVol},
		},
		"AlreadyCurrent": {
			reason: "nothing to do when the cdrom reads the current volume",
			state:  libvirt.StateRunning, seed: seedObj(legacy, true),
			want: want{UpToDate: true, Defined: legacy, Live: legacy, BaseVolume: baseVol},
		},
		"StatusNamesAnotherVolume": {
			reason: "a status naming a volume that is not the SeedVolume's own is never followed",
			state:  libvirt.StateRunning, seed: seedObj("team-b_db-99999999-0123456789abcdef.seed.iso", true),
			want: want{UpToDate: true, Defined: legacy, Live: legacy, BaseVolume: baseVol},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newFakeHost()
			x, err := domainxml.Domain(domainxml.Spec{Name: ourDomain, Type: "qemu", VCPU: 1, MemoryMiB: 512, Firmware: "uefi",
				RootDisk: domainxml.Volume{Pool: pool, Name: overlay}, Network: "default", MAC: domainxml.MAC(uid),
				Seed:  &domainxml.Volume{Pool: pool, Name: legacy},
				Owner: domainxml.Owner{UID: uid, Namespace: "team-a", Name: "vm", BaseVolume: baseVol}})
			if err != nil {
				t.Fatal(err)
			}
			h.domains[ourDomain] = libvirt.DomainInfo{Name: ourDomain, UUID: "uuid", State: tc.state, XML: x, InactiveXML: x}
			withOverlay(true)(t, h)
			s := runtime.NewScheme()
			_ = v1alpha1.SchemeBuilder.AddToScheme(s)
			e := newExt(h, false)
			e.kube = fake.NewClientBuilder().WithScheme(s).WithObjects([]client.Object{base, tc.seed}...).Build()
			cr := kvm(withSeed)
			o, err := e.Observe(context.Background(), cr)
			if err != nil {
				t.Fatal(err)
			}
			got := want{UpToDate: o.ResourceUpToDate}
			h.calls = nil
			if !o.ResourceUpToDate {
				if _, err := e.Update(context.Background(), cr); err != nil {
					t.Fatal(err)
				}
				for _, c := range h.calls {
					if !strings.HasPrefix(c, "Domain ") {
						got.Calls = append(got.Calls, c)
					}
				}
				if o, err := e.Observe(context.Background(), cr); err != nil || !o.ResourceUpToDate {
					t.Errorf("Observe after the switch: %+v, %v; want up to date", o, err)
				}
			}
			d := h.domains[ourDomain]
			if v, _ := domainxml.SeedOf(d.InactiveXML); v != nil {
				got.Defined = v.Name
			}
			if v, _ := domainxml.SeedOf(d.XML); v != nil {
				got.Live = v.Name
			}
			if m, _ := domainxml.OwnerOf(d.InactiveXML); m != nil {
				got.BaseVolume = m.BaseVolume
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}
