package hoststatus

import (
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
	"golang.org/x/crypto/ssh"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/host"
	lv "github.com/provider-kvm/provider-kvm/internal/libvirt"
)

var ignoreTime = cmpopts.IgnoreFields(xpv2.Condition{}, "LastTransitionTime")

func TestCondition(t *testing.T) {
	mismatch := &host.HostKeyError{Reason: host.HostKeyMismatch, Host: "[127.0.0.1]:2222",
		Presented: "ssh-ed25519 SHA256:AAA", Known: []string{"ssh-ed25519 SHA256:BBB"}}
	down := &host.HostDownError{Address: "root@127.0.0.1:2222", Failures: 2, Last: mismatch}
	dial := errors.Wrap(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, "cannot dial SSH server")
	libvirtDown := &host.LibvirtOpenError{URI: "qemu:///system", Err: errors.New("cannot open libvirt socket /run/libvirt/libvirt-sock: connect failed")}
	call := errors.New("cannot read the domain statistics of root@h:22: internal error")
	cfg := errors.New("cannot read the config: Secret kvm-system/key has no key \"id\"")
	refused := &host.LibvirtOpenError{URI: "qemu:///system", Err: errors.Wrap(&ssh.OpenChannelError{Reason: ssh.Prohibited, Message: "administratively prohibited"}, "cannot open libvirt socket")}

	cond := func(s corev1.ConditionStatus, r xpv2.ConditionReason, msg string) xpv2.Condition {
		return xpv2.Condition{Type: xpv2.TypeReady, Status: s, Reason: r, Message: msg}
	}
	cases := map[string]struct {
		reason string
		stage  Stage
		err    error
		want   xpv2.Condition
	}{
		"Ready":       {reason: "a read without error", stage: StageRead, want: cond(corev1.ConditionTrue, ReasonHostReady, msgReady)},
		"Config":      {reason: "the config or a Secret", stage: StageConfig, err: cfg, want: cond(corev1.ConditionFalse, ReasonConfigError, cfg.Error())},
		"KeyMismatch": {reason: "both fingerprints, through the breaker's error", stage: StageConnect, err: down, want: cond(corev1.ConditionFalse, ReasonHostKeyMismatch, down.Error())},
		"KeyUnknown": {reason: "no pinned key for the host", stage: StageConnect, err: &host.HostKeyError{Reason: host.HostKeyUnknown, Host: "h", Presented: "k"},
			want: cond(corev1.ConditionFalse, ReasonHostKeyUnknown, (&host.HostKeyError{Reason: host.HostKeyUnknown, Host: "h", Presented: "k"}).Error())},
		"Dial":        {reason: "the dial error", stage: StageConnect, err: dial, want: cond(corev1.ConditionFalse, ReasonUnreachable, dial.Error())},
		"LibvirtDown": {reason: "SSH works, libvirt's socket does not", stage: StageConnect, err: libvirtDown, want: cond(corev1.ConditionFalse, ReasonLibvirtUnavailable, libvirtDown.Error())},
		"Call":        {reason: "a libvirt call of the read", stage: StageRead, err: call, want: cond(corev1.ConditionFalse, ReasonLibvirtError, call.Error())},
		"ForwardingRefused": {reason: "sshd refusing the channel to libvirt's socket names the sshd setting", stage: StageConnect, err: refused,
			want: cond(corev1.ConditionFalse, ReasonPrerequisiteMissing, "missing on the host: SSH stream-local forwarding: sshd refused to forward to libvirt's socket ("+refused.Error()+"): set AllowStreamLocalForwarding yes (and AllowTcpForwarding yes, which readiness probes need) for the provider's user in sshd_config")},
		"Prerequisite": {reason: "a missing prerequisite found by the read", stage: StageRead, err: &PrerequisiteError{What: "storage pool default", Fix: "define it"},
			want: cond(corev1.ConditionFalse, ReasonPrerequisiteMissing, "missing on the host: storage pool default: define it")},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Condition(tc.stage, tc.err), ignoreTime); diff != "" {
				t.Errorf("%s\nCondition(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func q(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.BinarySI) }

func TestFigures(t *testing.T) {
	h := newFakeHost()
	r := Reading{Node: h.node, FreeMemory: h.free, Domains: h.domains,
		Ours: map[string]bool{dom("", 1, false, 0, 0).UUID(): true, dom("", 2, false, 0, 0).UUID(): true},
		Pools: []PoolReading{
			{Name: "zeta", Missing: true},
			{Name: "default", Pool: h.pools["default"], Volumes: map[string]uint64{ourSeed: 4096, ourRoot: 8192}},
		}}
	now := metav1.NewTime(time.Unix(1000, 0))
	want := &v1alpha1.HostStatus{
		Address: "root@h:22", LastSeen: &now, LibvirtVersion: "9.0.0", QEMUVersion: "7.2.0", CPUs: 8,
		MemoryTotal: q(16 << 30), MemoryFree: q(6 << 30),
		Pools: []v1alpha1.HostPool{
			{Name: "default", Active: true, Capacity: q(100 << 30), Allocation: q(40 << 30), Available: q(60 << 30)},
			{Name: "zeta", Missing: true},
		},
		// The foreign domain (UUID 3) is not counted.
		Managed: v1alpha1.HostUsage{Domains: 2, RunningDomains: 1, VCPUs: 3, Memory: q(1<<30 + 512<<20), Volumes: 2, VolumeBytes: q(12288)},
	}
	if diff := cmp.Diff(want, Figures("root@h:22", r, now)); diff != "" {
		t.Errorf("Figures(): -want, +got:\n%s", diff)
	}
}

func TestUsage(t *testing.T) {
	cases := map[string]struct {
		reason string
		r      Reading
		want   v1alpha1.HostUsage
	}{
		"Nothing": {reason: "no domains, no volumes", want: v1alpha1.HostUsage{Memory: q(0), VolumeBytes: q(0)}},
		"OnlyOurs": {
			reason: "only domains that carry our record count; running ones are counted apart",
			r: Reading{Domains: []lv.DomainStat{dom("a_b", 1, true, 2, 1<<30), dom("a_c", 2, false, 1, 1<<29), dom("x", 3, true, 8, 8<<30)},
				Ours: map[string]bool{dom("", 1, false, 0, 0).UUID(): true, dom("", 2, false, 0, 0).UUID(): true}},
			want: v1alpha1.HostUsage{Domains: 2, RunningDomains: 1, VCPUs: 3, Memory: q(1<<30 + 1<<29), VolumeBytes: q(0)},
		},
		"VolumesOverPools": {
			reason: "volumes of every pool read add up",
			r:      Reading{Pools: []PoolReading{{Name: "a", Volumes: map[string]uint64{"x": 1, "y": 2}}, {Name: "b", Missing: true}, {Name: "c", Volumes: map[string]uint64{"z": 4}}}},
			want:   v1alpha1.HostUsage{Memory: q(0), Volumes: 3, VolumeBytes: q(7)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Usage(tc.r)); diff != "" {
				t.Errorf("%s\nUsage(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// status is a config status with a Ready condition (empty status: none) and pools given as
// name: available of capacity 100.
func status(ready corev1.ConditionStatus, reason xpv2.ConditionReason, cordoned bool, pools map[string]int64) v1alpha1.ProviderConfigStatus {
	s := v1alpha1.ProviderConfigStatus{Unschedulable: cordoned}
	if ready != "" {
		s.SetConditions(xpv2.Condition{Type: xpv2.TypeReady, Status: ready, Reason: reason, Message: "m"})
	}
	if pools != nil {
		s.Host = &v1alpha1.HostStatus{}
		for n, avail := range pools {
			s.Host.Pools = append(s.Host.Pools, v1alpha1.HostPool{Name: n, Active: true, Capacity: q(100), Available: q(avail)})
		}
	}
	return s
}

func TestEvents(t *testing.T) {
	const (
		T = corev1.ConditionTrue
		F = corev1.ConditionFalse
	)
	unready := func(r xpv2.ConditionReason) event.Event {
		return event.Warning(ReasonBecameUnready, errors.Errorf("host is not ready (%s): %s", r, "m"))
	}
	low := func(p string, avail int64) event.Event {
		return event.Warning(ReasonPoolLow, errors.Errorf("storage pool %s has %s of %s available, under %d%%", p, q(avail).String(), q(100).String(), LowPoolPercent))
	}
	cases := map[string]struct {
		reason   string
		old, new v1alpha1.ProviderConfigStatus
		want     []event.Event
	}{
		"FirstReady":      {reason: "a first read that is ready says nothing", new: status(T, ReasonHostReady, false, map[string]int64{"default": 50})},
		"FirstUnready":    {reason: "a first read that is not ready warns", new: status(F, ReasonUnreachable, false, nil), want: []event.Event{unready(ReasonUnreachable)}},
		"BecomesUnready":  {reason: "ready, then not", old: status(T, ReasonHostReady, false, nil), new: status(F, ReasonHostKeyMismatch, false, nil), want: []event.Event{unready(ReasonHostKeyMismatch)}},
		"StaysUnready":    {reason: "unready for the same reason: no repeat", old: status(F, ReasonUnreachable, false, nil), new: status(F, ReasonUnreachable, false, nil)},
		"OtherReason":     {reason: "unready for another reason warns again", old: status(F, ReasonUnreachable, false, nil), new: status(F, ReasonLibvirtUnavailable, false, nil), want: []event.Event{unready(ReasonLibvirtUnavailable)}},
		"ReadyAgain":      {reason: "ready again", old: status(F, ReasonUnreachable, false, nil), new: status(T, ReasonHostReady, false, nil), want: []event.Event{event.Normal(ReasonBecameReady, "host is ready again: "+msgReady)}},
		"PoolFallsLow":    {reason: "a pool under 10% free", old: status(T, ReasonHostReady, false, map[string]int64{"default": 20, "b": 50}), new: status(T, ReasonHostReady, false, map[string]int64{"default": 9, "b": 50}), want: []event.Event{low("default", 9)}},
		"PoolStaysLow":    {reason: "a pool that was low already: no repeat", old: status(T, ReasonHostReady, false, map[string]int64{"default": 5}), new: status(T, ReasonHostReady, false, map[string]int64{"default": 4})},
		"PoolAtTen":       {reason: "exactly 10% is not under", new: status(T, ReasonHostReady, false, map[string]int64{"default": 10})},
		"NewPoolLow":      {reason: "a pool first seen low warns", new: status(T, ReasonHostReady, false, map[string]int64{"fast": 1}), want: []event.Event{low("fast", 1)}},
		"LowWhileUnready": {reason: "figures kept from the last read raise nothing while unready", old: status(T, ReasonHostReady, false, map[string]int64{"default": 50}), new: status(F, ReasonUnreachable, false, map[string]int64{"default": 5}), want: []event.Event{unready(ReasonUnreachable)}},
		"Cordoned":        {reason: "cordoned", old: status(T, ReasonHostReady, false, nil), new: status(T, ReasonHostReady, true, nil), want: []event.Event{event.Normal(ReasonCordoned, "host cordoned (spec.unschedulable): no new domains are created on it; those there keep running")}},
		"Uncordoned":      {reason: "uncordoned", old: status(T, ReasonHostReady, true, nil), new: status(T, ReasonHostReady, false, nil), want: []event.Event{event.Normal(ReasonUncordoned, "host uncordoned: new domains may be created on it")}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Events(tc.old, tc.new), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s\nEvents(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestNext(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	seen := &v1alpha1.HostStatus{Address: "root@old:22", LastSeen: &now, CPUs: 4}
	ready := Condition(StageRead, nil)
	down := Condition(StageConnect, errors.New("refused"))
	cases := map[string]struct {
		reason        string
		old           v1alpha1.ProviderConfigStatus
		unschedulable bool
		address       string
		cond          xpv2.Condition
		hs            *v1alpha1.HostStatus
		want          v1alpha1.ProviderConfigStatus
	}{
		"Read": {reason: "a read replaces the figures", old: v1alpha1.ProviderConfigStatus{Host: seen}, address: "root@h:22", cond: ready,
			hs:   &v1alpha1.HostStatus{Address: "root@h:22", CPUs: 8},
			want: v1alpha1.ProviderConfigStatus{Host: &v1alpha1.HostStatus{Address: "root@h:22", CPUs: 8}}},
		"Failed": {reason: "a failed read keeps the last figures and their lastSeen", old: v1alpha1.ProviderConfigStatus{Host: seen}, address: "root@h:22", cond: down, unschedulable: true,
			want: v1alpha1.ProviderConfigStatus{Unschedulable: true, Host: &v1alpha1.HostStatus{Address: "root@h:22", LastSeen: &now, CPUs: 4}}},
		"ConfigUnreadable": {reason: "no address when the config cannot be read", cond: Condition(StageConfig, errors.New("no secret")),
			want: v1alpha1.ProviderConfigStatus{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Next(tc.old, tc.unschedulable, tc.address, tc.cond, tc.hs)
			tc.want.SetConditions(tc.cond)
			if diff := cmp.Diff(tc.want, got, ignoreTime); diff != "" {
				t.Errorf("%s\nNext(): -want, +got:\n%s", tc.reason, diff)
			}
			if tc.old.Host != nil && tc.old.Host.Address != "root@old:22" {
				t.Error("Next() changed the old status")
			}
		})
	}
}

func TestMissing(t *testing.T) {
	pool := func(name string, active, missing bool) v1alpha1.HostPool {
		return v1alpha1.HostPool{Name: name, Active: active, Missing: missing}
	}
	cases := map[string]struct {
		reason string
		hs     *v1alpha1.HostStatus
		def    string
		want   string // "" for none
	}{
		"AllThere":  {reason: "a recent libvirt and an active default pool", hs: &v1alpha1.HostStatus{LibvirtVersion: "8.0.0", Pools: []v1alpha1.HostPool{pool("default", true, false)}}},
		"MinimumOK": {reason: "exactly the minimum", hs: &v1alpha1.HostStatus{LibvirtVersion: "7.2.0", Pools: []v1alpha1.HostPool{pool("default", true, false)}}},
		"OldLibvirt": {reason: "a libvirt older than the minimum is named", hs: &v1alpha1.HostStatus{LibvirtVersion: "6.0.0", Pools: []v1alpha1.HostPool{pool("default", true, false)}},
			want: "libvirt 7.2.0"},
		"PoolMissing": {reason: "the config's default pool does not exist", hs: &v1alpha1.HostStatus{LibvirtVersion: "9.0.0", Pools: []v1alpha1.HostPool{pool("images", false, true)}}, def: "images",
			want: "storage pool images"},
		"PoolInactive": {reason: "the default pool exists but is not started", hs: &v1alpha1.HostStatus{LibvirtVersion: "9.0.0", Pools: []v1alpha1.HostPool{pool("default", false, false)}},
			want: "active storage pool default"},
		"OtherPoolMissing": {reason: "a pool other than the default is not this check's business", hs: &v1alpha1.HostStatus{LibvirtVersion: "9.0.0", Pools: []v1alpha1.HostPool{pool("default", true, false), pool("x", false, true)}}},
		"UnknownVersion":   {reason: "a version that does not parse is not called old", hs: &v1alpha1.HostStatus{LibvirtVersion: "", Pools: []v1alpha1.HostPool{pool("default", true, false)}}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got string
			var pe *PrerequisiteError
			if err := Missing(tc.hs, tc.def); errors.As(err, &pe) {
				got = pe.What
			} else if err != nil {
				t.Fatalf("Missing: %v, not a PrerequisiteError", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nMissing: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
