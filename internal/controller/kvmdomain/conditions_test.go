package kvmdomain

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

func TestSetDomainConditions(t *testing.T) {
	type want struct {
		restart, agent, paused    corev1.ConditionStatus
		restartR, agentR, pausedR xpv2.ConditionReason
	}
	cases := map[string]struct {
		reason     string
		at         v1alpha1.KVMDomainObservation
		d          libvirt.DomainInfo
		agentAsked bool
		want       want
	}{
		"RunningAgentAnswers": {
			reason:     "A running guest whose agent answered is AgentConnected, not paused, no restart due.",
			at:         v1alpha1.KVMDomainObservation{GuestAgentConnected: true},
			d:          libvirt.DomainInfo{State: libvirt.StateRunning},
			agentAsked: true,
			want:       want{corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionFalse, ReasonUpToDate, ReasonAgentAnswers, ReasonNotPaused},
		},
		"RunningAgentSilent": {
			reason:     "An agent asked that did not answer is AgentConnected=False.",
			d:          libvirt.DomainInfo{State: libvirt.StateRunning},
			agentAsked: true,
			want:       want{corev1.ConditionFalse, corev1.ConditionFalse, corev1.ConditionFalse, ReasonUpToDate, ReasonAgentSilent, ReasonNotPaused},
		},
		"RunningAgentNotAsked": {
			reason: "An agent not asked (the lease answered) is Unknown, not False.",
			d:      libvirt.DomainInfo{State: libvirt.StateRunning},
			want:   want{corev1.ConditionFalse, corev1.ConditionUnknown, corev1.ConditionFalse, ReasonUpToDate, ReasonAgentNotAsk, ReasonNotPaused},
		},
		"RestartPending": {
			reason:     "restartPending becomes RestartRequired=True.",
			at:         v1alpha1.KVMDomainObservation{RestartPending: true, GuestAgentConnected: true},
			d:          libvirt.DomainInfo{State: libvirt.StateRunning},
			agentAsked: true,
			want:       want{corev1.ConditionTrue, corev1.ConditionTrue, corev1.ConditionFalse, ReasonSizeChanged, ReasonAgentAnswers, ReasonNotPaused},
		},
		"PausedIOError": {
			reason: "A domain QEMU paused on an I/O error is Paused=True with reason IOError.",
			d:      libvirt.DomainInfo{State: libvirt.StatePaused, PausedIOError: true},
			want:   want{corev1.ConditionFalse, corev1.ConditionUnknown, corev1.ConditionTrue, ReasonUpToDate, ReasonNotRunning, ReasonIOError},
		},
		"PausedByUser": {
			reason: "A domain paused for another reason is Paused=True with reason Paused.",
			d:      libvirt.DomainInfo{State: libvirt.StatePaused},
			want:   want{corev1.ConditionFalse, corev1.ConditionUnknown, corev1.ConditionTrue, ReasonUpToDate, ReasonNotRunning, ReasonPaused},
		},
		"ShutOff": {
			reason: "A shut-off domain is not paused and its agent is Unknown.",
			d:      libvirt.DomainInfo{State: libvirt.StateShutOff},
			want:   want{corev1.ConditionFalse, corev1.ConditionUnknown, corev1.ConditionFalse, ReasonUpToDate, ReasonNotRunning, ReasonNotPaused},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cr := &v1alpha1.KVMDomain{}
			cr.Status.AtProvider = tc.at
			setDomainConditions(cr, tc.d, tc.agentAsked)
			r, a, p := cr.GetCondition(ConditionRestartRequired), cr.GetCondition(ConditionAgentConnected), cr.GetCondition(ConditionPaused)
			got := want{r.Status, a.Status, p.Status, r.Reason, a.Reason, p.Reason}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateComparable(want{})); diff != "" {
				t.Errorf("%s\nsetDomainConditions(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
