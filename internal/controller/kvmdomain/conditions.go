package kvmdomain

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// Conditions a KVMDomain carries besides Ready and Synced, so that `kubectl wait
// --for=condition=...`, `kubectl describe` and `crossplane beta trace -o wide` show them. Each
// mirrors a status.atProvider field (restartPending, guestAgentConnected, state), which stays.
const (
	// ConditionRestartRequired is True while the persistent definition differs from the
	// running guest (vcpu, memory): the change applies at the guest's next restart.
	ConditionRestartRequired xpv2.ConditionType = "RestartRequired"
	// ConditionAgentConnected is True when the qemu guest agent answered this poll, False when
	// it was asked and did not, Unknown when it was not asked (the address came from the DHCP
	// lease) or the guest does not run.
	ConditionAgentConnected xpv2.ConditionType = "AgentConnected"
	// ConditionPaused is True while libvirt reports the domain paused.
	ConditionPaused xpv2.ConditionType = "Paused"
)

// Reasons of those conditions.
const (
	ReasonSizeChanged  xpv2.ConditionReason = "SizeChanged"
	ReasonUpToDate     xpv2.ConditionReason = "UpToDate"
	ReasonAgentAnswers xpv2.ConditionReason = "Answered"
	ReasonAgentSilent  xpv2.ConditionReason = "NoAnswer"
	ReasonAgentNotAsk  xpv2.ConditionReason = "NotAsked"
	ReasonNotRunning   xpv2.ConditionReason = "NotRunning"
	ReasonIOError      xpv2.ConditionReason = "IOError"
	ReasonPaused       xpv2.ConditionReason = "Paused"
	ReasonNotPaused    xpv2.ConditionReason = "NotPaused"
)

func condition(t xpv2.ConditionType, s corev1.ConditionStatus, r xpv2.ConditionReason, msg string) xpv2.Condition {
	return xpv2.Condition{Type: t, Status: s, Reason: r, Message: msg, LastTransitionTime: metav1.Now()}
}

// restartCondition is RestartRequired as status.atProvider.restartPending says.
func restartCondition(pending bool) xpv2.Condition {
	if pending {
		return condition(ConditionRestartRequired, corev1.ConditionTrue, ReasonSizeChanged,
			"vcpu or memory changed: the new values apply at the guest's next restart (power it off and on, or reboot it from inside)")
	}
	return condition(ConditionRestartRequired, corev1.ConditionFalse, ReasonUpToDate, "")
}

// agentCondition is AgentConnected: asked says whether the guest agent was asked this poll,
// answered whether it answered.
func agentCondition(running, asked, answered bool) xpv2.Condition {
	switch {
	case !running:
		return condition(ConditionAgentConnected, corev1.ConditionUnknown, ReasonNotRunning, "the domain does not run")
	case !asked:
		return condition(ConditionAgentConnected, corev1.ConditionUnknown, ReasonAgentNotAsk,
			"the guest agent was not asked: the address came from another source")
	case answered:
		return condition(ConditionAgentConnected, corev1.ConditionTrue, ReasonAgentAnswers, "")
	}
	return condition(ConditionAgentConnected, corev1.ConditionFalse, ReasonAgentSilent,
		"the qemu guest agent does not answer: the guest has not booted that far, or its image has no qemu-guest-agent")
}

// pausedCondition is Paused as libvirt reports the domain's state.
func pausedCondition(d libvirt.DomainInfo) xpv2.Condition {
	switch {
	case d.State == libvirt.StatePaused && d.PausedIOError:
		return condition(ConditionPaused, corev1.ConditionTrue, ReasonIOError,
			"QEMU paused the guest when a write to its disk failed; it is resumed once its pool has room (see Ready)")
	case d.State == libvirt.StatePaused:
		return condition(ConditionPaused, corev1.ConditionTrue, ReasonPaused,
			"paused on the host (virsh suspend, a migration or a snapshot); the provider does not resume it")
	}
	return condition(ConditionPaused, corev1.ConditionFalse, ReasonNotPaused, "")
}

// setDomainConditions sets the three conditions of cr from what Observe found.
func setDomainConditions(cr *v1alpha1.KVMDomain, d libvirt.DomainInfo, agentAsked bool) {
	at := cr.Status.AtProvider
	cr.SetConditions(restartCondition(at.RestartPending), pausedCondition(d),
		agentCondition(d.State == libvirt.StateRunning, agentAsked, at.GuestAgentConnected))
}
