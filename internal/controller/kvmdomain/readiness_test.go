package kvmdomain

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/probe"
)

func TestProbeCheck(t *testing.T) {
	cases := map[string]struct {
		p    *v1alpha1.ReadinessProbe
		want probe.Check
	}{
		"TCPDefaultTimeout": {
			p:    &v1alpha1.ReadinessProbe{TCP: &v1alpha1.TCPProbe{Port: 22}},
			want: probe.Check{Addr: "192.0.2.7:22", Timeout: defaultProbeTimeout},
		},
		"HTTPProxy": {
			p: &v1alpha1.ReadinessProbe{TimeoutSeconds: 60, HTTPProxy: &v1alpha1.HTTPProxyProbe{
				Port: 3128, URL: "http://example.com/generate_204", ExpectedStatus: 204}},
			want: probe.Check{Addr: "192.0.2.7:3128", HTTP: true, URL: "http://example.com/generate_204", Status: 204, Timeout: time.Minute},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, probeCheck(tc.p, "192.0.2.7")); diff != "" {
				t.Errorf("probeCheck(...): -want, +got:\n%s", diff)
			}
		})
	}
}

func TestReportProbe(t *testing.T) {
	errHang := errors.New("no answer from the proxy at 192.0.2.7:3128")
	type want struct {
		Probe   string
		Ready   corev1.ConditionStatus
		Message string
	}
	cases := map[string]struct {
		reason string
		before string // status.atProvider.probe before
		r      *probe.Result
		want   want
	}{
		"Pending": {
			reason: "no result yet: pending, not Ready, and Observe did not wait for one",
			want:   want{Probe: probePending, Ready: corev1.ConditionFalse, Message: "readiness probe pending: it runs in the background, and its result is reported as soon as it ends"},
		},
		"PassingKept": {
			reason: "no result of this process yet, but status says passing: stays Available (a restart does not flip Ready domains)",
			before: probePassing,
			want:   want{Probe: probePassing, Ready: corev1.ConditionTrue},
		},
		"FailingNotKept": {
			reason: "no result yet after a failing one: pending",
			before: "failing: no answer",
			want:   want{Probe: probePending, Ready: corev1.ConditionFalse, Message: "readiness probe pending: it runs in the background, and its result is reported as soon as it ends"},
		},
		"Failing": {
			reason: "the last result failed: Unavailable with why",
			before: probePassing,
			r:      &probe.Result{Err: errHang},
			want:   want{Probe: "failing: " + errHang.Error(), Ready: corev1.ConditionFalse, Message: "readiness probe failing: " + errHang.Error()},
		},
		"Passing": {
			reason: "the last result passed: Available",
			r:      &probe.Result{},
			want:   want{Probe: probePassing, Ready: corev1.ConditionTrue},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cr := &v1alpha1.KVMDomain{}
			cr.Status.AtProvider.Probe = tc.before
			reportProbe(cr, tc.r)
			c := cr.GetCondition(xpv2.TypeReady)
			got := want{Probe: cr.Status.AtProvider.Probe, Ready: c.Status, Message: c.Message}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("\n%s\nreportProbe(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
