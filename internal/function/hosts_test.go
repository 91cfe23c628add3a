package function

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestHostNotReady: a replica whose host is not Ready. Its KVMDomain's Ready is the last the
// provider read, so the replica is not counted Ready and leaves the EndpointSlice while
// another replica is Ready (and stays in it, listed Ready, while none is: it may still
// answer). With the platform's placement.failoverAfter, once the host has not been Ready for
// that long the replica is placed anew on another host, as an evacuation is; before then,
// Crossplane is asked to call again when the bound is reached.
func TestHostNotReady(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	two, twoStatus := settled(t, replicatedXR)
	bothSt := statusOf{ResourceDomain: domainAt("192.168.122.50", true), ResourceSeed: inputReady,
		"domain-r1-<id>": domainAt("192.168.122.51", true), "seed-r1-<id>": inputReady}
	downB := func(since string) hostOpts {
		return hostOpts{unready: true, downSince: since, downWhy: "cannot connect to libvirt: connection refused"}
	}
	failover := testPolicy + "placement: {failoverAfter: 5m}\n"
	strictFailover := testPolicy + "placement: {failoverAfter: 5m, antiAffinity: Strict}\n"
	cases := map[string]struct {
		reason    string
		policy    string
		hosts     []map[string]any
		domains   []string
		endpoints []string
		ready     float64 // status.readyReplicas
		phase     string  // ProxyReady's reason
		message   string  // in status.message
		placed    string  // Placed's status/reason; "" not checked
		placedMsg string
		ttl       time.Duration // 0: the default
	}{
		"OutOfTheServiceWhileAnotherServes": {
			reason:    "Without failoverAfter, replica 1 stays on host-b, out of the EndpointSlice while replica 0 serves; the Proxy is Ready with 1 of 2.",
			policy:    testPolicy,
			hosts:     []map[string]any{hostCPC(t, "host-a", hostOpts{}), hostCPC(t, "host-b", downB("2026-01-01T11:00:00Z")), hostCPC(t, "host-c", hostOpts{})},
			domains:   []string{"domain@host-a", "domain-r1-<id>@host-b"},
			endpoints: []string{"192.168.122.50=true"},
			ready:     1,
			phase:     PhaseReady,
			message:   "1 of 2 replicas Ready; replica 1: host host-b is not Ready: cannot connect to libvirt: connection refused; its VM was Ready when last seen",
		},
		"WaitsForTheBound": {
			reason:    "Not Ready for 4m30s of 5m: nothing moves yet, and Crossplane is asked to call again in 30s, when the bound is reached, not at its usual minute.",
			policy:    failover,
			hosts:     []map[string]any{hostCPC(t, "host-a", hostOpts{}), hostCPC(t, "host-b", downB("2026-01-01T11:55:30Z")), hostCPC(t, "host-c", hostOpts{})},
			domains:   []string{"domain@host-a", "domain-r1-<id>@host-b"},
			endpoints: []string{"192.168.122.50=true"},
			ready:     1,
			phase:     PhaseReady,
			ttl:       30 * time.Second,
		},
		"FailsOverAfterTheBound": {
			reason:    "Not Ready for 10 minutes of 5: replica 1 gets a new generation on host-c, beside the one on host-b, which leaves once the new one serves.",
			policy:    failover,
			hosts:     []map[string]any{hostCPC(t, "host-a", hostOpts{}), hostCPC(t, "host-b", downB("2026-01-01T11:50:00Z")), hostCPC(t, "host-c", hostOpts{})},
			domains:   []string{"domain@host-a", "domain-r1-<id>@host-b", "domain-r1-<id>@host-c"},
			endpoints: []string{"192.168.122.50=true"},
			ready:     1,
			phase:     PhaseReady,
			placed:    "STATUS_CONDITION_TRUE/Placed",
			placedMsg: "its 2 replicas are on host-a, host-c",
		},
		"NowhereToFailOverTo": {
			reason:    "With Strict anti-affinity and no third host, replica 1 stays on host-b, and Placed says why.",
			policy:    strictFailover,
			hosts:     []map[string]any{hostCPC(t, "host-a", hostOpts{}), hostCPC(t, "host-b", downB("2026-01-01T11:50:00Z"))},
			domains:   []string{"domain@host-a", "domain-r1-<id>@host-b"},
			endpoints: []string{"192.168.122.50=true"},
			ready:     1,
			phase:     PhaseReady,
			placed:    "STATUS_CONDITION_FALSE/EvacuationBlocked",
			placedMsg: "replica 1: host host-b has not been Ready for 10m0s (the platform fails over after 5m0s), but no other host fits",
		},
		"NoHostReadyFailsOpen": {
			reason:    "Both hosts not Ready: nothing is known to serve, so both stay listed Ready (they may still answer), none is counted, and the Proxy says why.",
			policy:    testPolicy,
			hosts:     []map[string]any{hostCPC(t, "host-a", downB("2026-01-01T11:59:00Z")), hostCPC(t, "host-b", downB("2026-01-01T11:59:00Z"))},
			domains:   []string{"domain@host-a", "domain-r1-<id>@host-b"},
			endpoints: []string{"192.168.122.50=true", "192.168.122.51=true"},
			ready:     0,
			phase:     PhaseHostNotReady,
			message:   "host host-a is not Ready: cannot connect to libvirt: connection refused; its VM was Ready when last seen",
		},
		"ReplicaZeroDownReplicaOneServes": {
			reason:    "Replica 0's host is not Ready: replica 1 serves alone; the Secret keeps naming the Service.",
			policy:    testPolicy,
			hosts:     []map[string]any{hostCPC(t, "host-a", downB("2026-01-01T11:59:00Z")), hostCPC(t, "host-b", hostOpts{})},
			domains:   []string{"domain@host-a", "domain-r1-<id>@host-b"},
			endpoints: []string{"192.168.122.51=true"},
			ready:     1,
			phase:     PhaseReady,
			message:   "1 of 2 replicas Ready; replica 0: host host-a is not Ready",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := newRequest(t, xrWithStatus(t, replicatedXR, twoStatus), observe(t, two, bothSt))
			req.Input = st(t, tc.policy)
			withHosts(t, req, tc.hosts...)
			rsp := runAt(t, req, now)
			d := desired(rsp)
			sort.Strings(tc.domains)
			if diff := cmp.Diff(tc.domains, domainHosts(d)); diff != "" {
				t.Errorf("%s\ncomposed domains (-want +got):\n%s", tc.reason, diff)
			}
			if diff := cmp.Diff(tc.endpoints, endpointIPs(d)); diff != "" {
				t.Errorf("%s\nEndpointSlice (-want +got):\n%s", tc.reason, diff)
			}
			status := xrStatusAll(rsp)
			if status["readyReplicas"] != tc.ready {
				t.Errorf("%s\nstatus.readyReplicas = %v, want %v", tc.reason, status["readyReplicas"], tc.ready)
			}
			if msg, _ := status["message"].(string); !strings.Contains(msg, tc.message) {
				t.Errorf("%s\nstatus.message %q does not say %q", tc.reason, msg, tc.message)
			}
			if c := conditionOf(rsp, ConditionProxyReady); c == nil || c.GetReason() != tc.phase {
				t.Errorf("%s\nProxyReady = %v, want reason %s", tc.reason, c, tc.phase)
			}
			if tc.placed != "" {
				c := conditionOf(rsp, ConditionPlaced)
				if c == nil {
					t.Fatalf("%s\nno Placed condition", tc.reason)
				}
				if got := c.GetStatus().String() + "/" + c.GetReason(); got != tc.placed {
					t.Errorf("%s\nPlaced = %s, want %s", tc.reason, got, tc.placed)
				}
				if !strings.Contains(c.GetMessage(), tc.placedMsg) {
					t.Errorf("%s\nPlaced message %q does not say %q", tc.reason, c.GetMessage(), tc.placedMsg)
				}
			}
			want := tc.ttl
			if want == 0 {
				want = time.Minute
			}
			if got := rsp.GetMeta().GetTtl().AsDuration(); got != want {
				t.Errorf("%s\nresponse TTL = %s, want %s", tc.reason, got, want)
			}
		})
	}
}

// TestFailoverAfterBelowTheMinimum: a failoverAfter that a libvirtd restart would reach is
// refused with a message that names the field.
func TestFailoverAfterBelowTheMinimum(t *testing.T) {
	req := newRequest(t, replicatedXR, nil)
	req.Input = st(t, testPolicy+"placement: {failoverAfter: 10s}\n")
	rsp := run(t, req)
	got := strings.Join(fatals(rsp), "\n")
	if !strings.Contains(got, "placement.failoverAfter 10s is below 1m") {
		t.Errorf("fatal results %q do not refuse placement.failoverAfter 10s", got)
	}
}

// TestFailoverSequence: replica 1's host stays not Ready past failoverAfter. Call after call,
// with the new VM on host-c coming up Ready, the sequence ends with replica 1 on host-c alone,
// in the EndpointSlice beside replica 0, and its generation on host-b gone from the desired
// state (Crossplane deletes it; the provider removes the VM when host-b answers again). At
// no call does the EndpointSlice lose replica 0.
func TestFailoverSequence(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	d, status := settled(t, replicatedXR)
	hosts := []map[string]any{hostCPC(t, "host-a", hostOpts{}),
		hostCPC(t, "host-b", hostOpts{unready: true, downSince: "2026-01-01T11:50:00Z"}), hostCPC(t, "host-c", hostOpts{})}
	// What the provider reports of each KVMDomain: by its host.
	byHost := map[string]string{"host-a": domainAt("192.168.122.50", true), "host-b": domainAt("192.168.122.51", true), "host-c": domainAt("192.168.122.52", true)}
	var steps []string
	for range 12 {
		req := newRequest(t, xrWithStatus(t, replicatedXR, status), asObserved(t, d, statusByHost(d, byHost)))
		req.Input = st(t, testPolicy+"placement: {failoverAfter: 5m}\n")
		withHosts(t, req, hosts...)
		rsp := runAt(t, req, now)
		prev := d
		d, status = desired(rsp), xrStatusAll(rsp)
		eps := endpointIPs(d)
		if !strings.Contains(strings.Join(eps, " "), "192.168.122.50=true") {
			t.Errorf("a call left replica 0 out of the EndpointSlice: %v", eps)
		}
		steps = append(steps, strings.Join(domainHosts(d), ",")+" | "+strings.Join(eps, ","))
		if cmp.Diff(prev, d) == "" {
			break
		}
	}
	if diff := cmp.Diff([]string{"domain-r1-<id>@host-c", "domain@host-a"}, domainHosts(d)); diff != "" {
		t.Errorf("domains once failed over (-want +got):\n%s\nsteps:\n%s", diff, strings.Join(steps, "\n"))
	}
	if diff := cmp.Diff([]string{"192.168.122.50=true", "192.168.122.52=true"}, endpointIPs(d)); diff != "" {
		t.Errorf("EndpointSlice once failed over (-want +got):\n%s", diff)
	}
	if status["readyReplicas"] != float64(2) {
		t.Errorf("status.readyReplicas = %v once failed over, want 2", status["readyReplicas"])
	}
}

// TestFailoverOneReplica: a Proxy of one replica whose host has not been Ready for longer
// than failoverAfter is placed anew, and its Placed condition says why it moves.
func TestFailoverOneReplica(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	req := newRequest(t, placedXR+"status: {host: a}\n", map[string]string{ResourceDomain: `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: web, namespace: team-a}
spec:
  providerConfigRef: {kind: ClusterProviderConfig, name: a}
`})
	req.Input = st(t, testPolicy+"placement: {failoverAfter: 5m}\n")
	withHosts(t, req, hostCPC(t, "a", hostOpts{unready: true, downSince: "2026-01-01T11:50:00Z"}), hostCPC(t, "b", hostOpts{}))
	rsp := runAt(t, req, now)
	want := "STATUS_CONDITION_TRUE/Placed: host a has not been Ready for 10m0s (the platform fails over after 5m0s): moving to host b (the VM there takes over once Ready). placed on host b: 23552 MiB of memory and 127 vCPUs left there once placed (of 2 hosts considered)"
	if diff := cmp.Diff(want, placedCondition(rsp)); diff != "" {
		t.Errorf("Placed (-want +got):\n%s", diff)
	}
	if got := strings.Join(domainHosts(desired(rsp)), " "); !strings.Contains(got, "@b") {
		t.Errorf("composed domains %q: none on host b", got)
	}
}

// TestHostsAskedForPinnedReplicas: a Proxy of two replicas whose spec.host places replica 0 and
// whose replica 1 is placed needs no placement, but still asks for the hosts, so that a host
// that is not Ready takes its replica out of the Service.
func TestHostsAskedForPinnedReplicas(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pinned := strings.Replace(replicatedXR, "replicas: 2", "replicas: 2\n  host: host-a", 1)
	two, twoStatus := settled(t, pinned)
	bothSt := statusOf{ResourceDomain: domainAt("192.168.122.50", true), ResourceSeed: inputReady,
		"domain-r1-<id>": domainAt("192.168.122.51", true), "seed-r1-<id>": inputReady}
	req := newRequest(t, xrWithStatus(t, pinned, twoStatus), observe(t, two, bothSt))
	withHosts(t, req) // not given yet
	rsp := runAt(t, req, now)
	if r := rsp.GetRequirements().GetResources()[RequirementHosts]; r == nil || r.GetKind() != "ClusterProviderConfig" {
		t.Fatalf("the hosts are not asked for: %v", rsp.GetRequirements())
	}
	withHosts(t, req, hostCPC(t, "host-a", hostOpts{unready: true, downSince: "2026-01-01T11:59:00Z"}), hostCPC(t, "host-b", hostOpts{}))
	rsp = runAt(t, req, now)
	if diff := cmp.Diff([]string{"192.168.122.51=true"}, endpointIPs(desired(rsp))); diff != "" {
		t.Errorf("EndpointSlice with host-a not Ready (-want +got):\n%s", diff)
	}
}

// statusByHost is the observed status of desired resources d: each KVMDomain's as byHost gives
// it for the host it is on, each SeedVolume Ready.
func statusByHost(d map[string]map[string]any, byHost map[string]string) map[string]string {
	s := map[string]string{}
	for k, o := range d {
		switch {
		case k == ResourceDomain || strings.HasPrefix(k, ResourceDomain+"-"):
			spec, _ := o["spec"].(map[string]any)
			ref, _ := spec["providerConfigRef"].(map[string]any)
			h, _ := ref["name"].(string)
			s[k] = byHost[h]
		case k == ResourceSeed || strings.HasPrefix(k, ResourceSeed+"-"):
			s[k] = inputReady
		}
	}
	return s
}
