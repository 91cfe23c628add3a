package function

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// proxyReadyCondition is the ProxyReady condition of a response, as
// "Status/Reason/Target: message", or "" when there is none.
func proxyReadyCondition(rsp *fnv1.RunFunctionResponse) string {
	for _, c := range rsp.GetConditions() {
		if c.GetType() == ConditionProxyReady {
			return fmt.Sprintf("%s/%s/%s: %s", c.GetStatus(), c.GetReason(), c.GetTarget(), c.GetMessage())
		}
	}
	return ""
}

func TestProxyReadyCondition(t *testing.T) {
	cases := map[string]struct {
		reason   string
		xr       string
		observed map[string]string
		hosts    []map[string]any // nil: the one roomy host newRequest gives
		asking   bool             // the hosts were asked for, not answered yet
		want     string
	}{
		"Ready": {
			reason:   "A Proxy whose KVMDomain is Ready is ProxyReady=True, with reason Ready.",
			xr:       minimalXR,
			observed: map[string]string{ResourceDomain: observedDomainReady},
			want:     "STATUS_CONDITION_TRUE/Ready/TARGET_COMPOSITE_AND_CLAIM: squid answers through the proxy",
		},
		"ProbingCarriesTheBlockingMessage": {
			reason: "A guest with an address whose probe fails: reason Probing, and the KVMDomain's own message.",
			xr:     minimalXR,
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  atProvider: {state: Running, ipv4: 192.168.122.51}
  conditions:
  - {type: Synced, status: "True"}
  - {type: Ready, status: "False", reason: Unavailable, message: "readiness probe failing: connection refused"}
`},
			want: "STATUS_CONDITION_FALSE/Probing/TARGET_COMPOSITE_AND_CLAIM: readiness probe failing: connection refused",
		},
		"BootingWithoutMessageSaysWhatThePhaseMeans": {
			reason: "When the blocking resource says nothing, the message says what the phase means (never empty).",
			xr:     minimalXR,
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  atProvider: {state: Running}
`},
			want: "STATUS_CONDITION_FALSE/Booting/TARGET_COMPOSITE_AND_CLAIM: the VM runs; its guest has no address yet",
		},
		"Error": {
			reason: "A KVMDomain that cannot be reconciled: reason Error, with its Synced message.",
			xr:     minimalXR,
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  conditions: [{type: Synced, status: "False", reason: ReconcileError, message: "host full: needs 1024 MiB"}]
`, ResourceSeed: observedSeedReady, ResourceBaseImage: observedImageReady},
			want: "STATUS_CONDITION_FALSE/Error/TARGET_COMPOSITE_AND_CLAIM: host full: needs 1024 MiB",
		},
		"Stopped": {
			reason: "A shut-off domain: reason Stopped.",
			xr:     minimalXR,
			observed: map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  atProvider: {state: ShutOff}
  conditions: [{type: Synced, status: "True"}, {type: Ready, status: "False", message: "domain is ShutOff"}]
`},
			want: "STATUS_CONDITION_FALSE/Stopped/TARGET_COMPOSITE_AND_CLAIM: domain is ShutOff",
		},
		"CreatingWaitsForItsSeed": {
			reason: "A domain waiting for its seed: reason Creating, naming the seed and its own message.",
			xr:     minimalXR,
			observed: map[string]string{
				ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
status:
  atProvider: {waitingFor: SeedVolume web-seed}
  conditions: [{type: Synced, status: "False", reason: ReconcileError}]
`,
				ResourceSeed: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: SeedVolume
status:
  conditions: [{type: Synced, status: "False", reason: ReconcileError, message: "pool default is not active"}]
`},
			want: "STATUS_CONDITION_FALSE/Creating/TARGET_COMPOSITE_AND_CLAIM: waiting for SeedVolume web-seed to be Ready: pool default is not active",
		},
		"PendingWhileChoosing": {
			reason: "A Proxy without a host whose hosts were asked for: reason Pending.",
			xr:     placedXR,
			asking: true,
			want:   "STATUS_CONDITION_FALSE/Pending/TARGET_COMPOSITE_AND_CLAIM: " + msgChoosing,
		},
		"PendingNoHostFits": {
			reason: "A Proxy no host fits: reason Pending, with placement's message naming each host's reason.",
			xr:     placedXR,
			hosts:  []map[string]any{hostCPC(t, "a", hostOpts{cordoned: true})},
			want:   "STATUS_CONDITION_FALSE/Pending/TARGET_COMPOSITE_AND_CLAIM: no host fits: a: cordoned (spec.unschedulable)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := newRequest(t, tc.xr, tc.observed)
			switch {
			case tc.asking:
				withHosts(t, req)
			case tc.hosts != nil:
				withHosts(t, req, tc.hosts...)
			}
			rsp := run(t, req)
			mustNoFatal(t, rsp)
			if diff := cmp.Diff(tc.want, proxyReadyCondition(rsp)); diff != "" {
				t.Errorf("%s\nProxyReady: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
