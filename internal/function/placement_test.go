package function

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// hostOpts shape a ClusterProviderConfig as the host status controller leaves it.
type hostOpts struct {
	unready, cordoned bool
	downSince         string // with unready: its Ready condition's lastTransitionTime (RFC 3339); "": 2026-01-01T00:00:00Z
	downWhy           string // with unready: its Ready condition's message
	evacuate          bool   // spec.evacuate (with cordoned)
	cpus              int64  // 0: 8
	memGiB            int64  // 0: 16
	usedCPU, usedMiB  int64
	labels            map[string]string
	memoryRatio       string         // spec.allocation.memory; "": unset
	allowed           map[string]any // spec.allowedNamespaces; nil: unset
	defaults          map[string]any // spec.defaults; nil: unset
	attachments       []any          // spec.attachments; nil: unset
}

func hostCPC(t *testing.T, name string, o hostOpts) map[string]any {
	t.Helper()
	if o.cpus == 0 {
		o.cpus = 8
	}
	if o.memGiB == 0 {
		o.memGiB = 16
	}
	ready := "True"
	if o.unready {
		ready = "False"
	}
	spec := map[string]any{"unschedulable": o.cordoned}
	if o.evacuate {
		spec["evacuate"] = true
	}
	if o.allowed != nil {
		spec["allowedNamespaces"] = o.allowed
	}
	if o.defaults != nil {
		spec["defaults"] = o.defaults
	}
	if o.attachments != nil {
		spec["attachments"] = o.attachments
	}
	if o.memoryRatio != "" {
		spec["allocation"] = map[string]any{"memory": o.memoryRatio}
	}
	readyCond := map[string]any{"type": "Ready", "status": ready, "reason": "Available", "lastTransitionTime": "2026-01-01T00:00:00Z"}
	if o.unready {
		readyCond["reason"] = "Unavailable"
		if o.downSince != "" {
			readyCond["lastTransitionTime"] = o.downSince
		}
		if o.downWhy != "" {
			readyCond["message"] = o.downWhy
		}
	}
	labels := map[string]any{}
	for k, v := range o.labels {
		labels[k] = v
	}
	return map[string]any{
		"apiVersion": "kvm.crossplane.io/v1alpha1", "kind": "ClusterProviderConfig",
		"metadata": map[string]any{"name": name, "labels": labels},
		"spec":     spec,
		"status": map[string]any{
			"conditions": []any{readyCond},
			"host": map[string]any{
				"cpus": o.cpus, "memoryTotal": fmt.Sprintf("%dGi", o.memGiB), "memoryFree": "1Gi",
				"managed": map[string]any{"domains": 1, "runningDomains": 1, "vcpus": o.usedCPU, "memory": fmt.Sprintf("%dMi", o.usedMiB), "volumes": 0},
			},
		},
	}
}

// withHosts answers the function's requirement for hosts with these ClusterProviderConfigs
// (none: Crossplane found none); a nil list removes the answer (Crossplane was not asked yet).
func withHosts(t *testing.T, req *fnv1.RunFunctionRequest, hosts ...map[string]any) {
	t.Helper()
	if hosts == nil {
		req.RequiredResources = nil
		return
	}
	rs := &fnv1.Resources{}
	for _, h := range hosts {
		s := structOf(t, h)
		rs.Items = append(rs.Items, &fnv1.Resource{Resource: s})
	}
	// The shared BaseImage, when asked for, is not found unless a case puts one (withImage).
	req.RequiredResources = map[string]*fnv1.Resources{RequirementHosts: rs, RequirementBaseImage: {}}
}

// withImage answers the requirement for the shared BaseImage with one on host, in namespace
// ns.
func withImage(t *testing.T, req *fnv1.RunFunctionRequest, ns, name, host string) {
	t.Helper()
	img := map[string]any{
		"apiVersion": "kvm.crossplane.io/v1alpha1", "kind": "BaseImage",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"providerConfigRef": map[string]any{"kind": "ClusterProviderConfig", "name": host}},
	}
	req.RequiredResources[RequirementBaseImage] = &fnv1.Resources{Items: []*fnv1.Resource{{Resource: structOf(t, img)}}}
}

func structOf(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const placedXR = `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: web, namespace: team-a, uid: 1b2c}
spec:
  image: {baseImageName: debian-12}
  memoryMiB: 1024
`

// placedCondition is the Placed condition of a response, as "Status/Reason: message".
func placedCondition(rsp *fnv1.RunFunctionResponse) string {
	for _, c := range rsp.GetConditions() {
		if c.GetType() == ConditionPlaced {
			return fmt.Sprintf("%s/%s: %s", c.GetStatus(), c.GetReason(), c.GetMessage())
		}
	}
	return ""
}

func composedNames(rsp *fnv1.RunFunctionResponse) []string {
	var out []string
	for n := range rsp.GetDesired().GetResources() {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func TestPlacement(t *testing.T) {
	all := []string{ResourceDomain, ResourceSeed, ResourceService}
	domainOn := func(host string) string {
		return `
apiVersion: kvm.crossplane.io/v1alpha1
kind: KVMDomain
metadata: {name: web, namespace: team-a}
spec:
  providerConfigRef: {kind: ClusterProviderConfig, name: ` + host + `}
`
	}
	type want struct {
		host      string // providerConfigRef of the composed KVMDomain; "" none composed
		composed  []string
		status    map[string]any // the fields of status compared
		condition string
		// requirement: the labels the hosts are asked for with; nil: not asked.
		requirement map[string]string
		fatal       bool
	}
	cases := map[string]struct {
		reason   string
		xr       string
		input    string
		observed map[string]string
		hosts    []map[string]any // nil: the requirement was not answered yet
		imageOn  string           // the shared BaseImage's host; "": not found
		imageNS  string           // the namespace of the BaseImage given; "": team-a
		nsLabels map[string]any   // the Proxy's Namespace as Crossplane gives it; nil: not given
		want     want
	}{
		"AsksForHosts": {
			reason: "A Proxy without host and not placed asks Crossplane for the hosts and composes nothing until they come.",
			xr:     placedXR,
			want: want{
				status:      map[string]any{"phase": PhasePending, "message": msgChoosing},
				condition:   "STATUS_CONDITION_UNKNOWN/Choosing: choosing a host",
				requirement: map[string]string{},
			},
		},
		"MostMemoryLeft": {
			reason: "Among Ready, uncordoned hosts with room, the one with most memory left wins; the choice is recorded in status.host.",
			xr:     placedXR,
			hosts:  []map[string]any{hostCPC(t, "a", hostOpts{usedMiB: 12 << 10}), hostCPC(t, "b", hostOpts{usedMiB: 1024})},
			want: want{
				host: "b", composed: all,
				status:      map[string]any{"phase": PhaseCreating, "host": "b"},
				condition:   "STATUS_CONDITION_TRUE/Placed: placed on host b: 22528 MiB of memory and 127 vCPUs left there once placed (of 2 hosts considered)",
				requirement: map[string]string{},
			},
		},
		"SkipsCordonedAndUnready": {
			reason: "Cordoned and unready hosts are skipped however much room they have.",
			xr:     placedXR,
			hosts: []map[string]any{
				hostCPC(t, "big-cordoned", hostOpts{memGiB: 512, cordoned: true}),
				hostCPC(t, "big-unready", hostOpts{memGiB: 512, unready: true}),
				hostCPC(t, "small", hostOpts{memGiB: 2}),
			},
			want: want{host: "small", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "small"},
				condition:   "STATUS_CONDITION_TRUE/Placed: placed on host small: 2048 MiB of memory and 127 vCPUs left there once placed (of 3 hosts considered)",
				requirement: map[string]string{}},
		},
		"MemoryRatio": {
			reason: "A host's memory ratio counts: 1 GiB held of 1 GiB fits 1 GiB more at ratio 2, none at 1.",
			xr:     placedXR,
			hosts: []map[string]any{
				hostCPC(t, "a", hostOpts{memGiB: 1, usedMiB: 1024, memoryRatio: "1"}),
				hostCPC(t, "b", hostOpts{memGiB: 1, usedMiB: 1024, memoryRatio: "2"}),
			},
			want: want{host: "b", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "b"},
				condition:   "STATUS_CONDITION_TRUE/Placed: placed on host b: 0 MiB of memory and 127 vCPUs left there once placed (of 2 hosts considered)",
				requirement: map[string]string{}},
		},
		"WhereTheImageIs": {
			reason:  "A Proxy that boots a shared BaseImage goes to the image's host, even with more room elsewhere.",
			xr:      placedXR,
			hosts:   []map[string]any{hostCPC(t, "a", hostOpts{memGiB: 64}), hostCPC(t, "b", hostOpts{})},
			imageOn: "b",
			want: want{host: "b", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "b"},
				condition:   "STATUS_CONDITION_TRUE/Placed: placed on host b: 23552 MiB of memory and 127 vCPUs left there once placed (of 2 hosts considered)",
				requirement: map[string]string{}},
		},
		"OtherNamespacesImage": {
			reason:  "A BaseImage of another namespace (were Crossplane to give one) neither steers placement nor is named.",
			xr:      placedXR,
			hosts:   []map[string]any{hostCPC(t, "a", hostOpts{memGiB: 64}), hostCPC(t, "b", hostOpts{})},
			imageOn: "b",
			imageNS: "team-b",
			want: want{host: "a", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "a"},
				condition:   "STATUS_CONDITION_TRUE/Placed: placed on host a: 97280 MiB of memory and 127 vCPUs left there once placed (of 2 hosts considered)",
				requirement: map[string]string{}},
		},
		"NotAdmittedByName": {
			reason: "A host whose allowedNamespaces leaves the Proxy's namespace out is skipped, however much room it has.",
			xr:     placedXR,
			hosts: []map[string]any{
				hostCPC(t, "a", hostOpts{memGiB: 64, allowed: map[string]any{"names": []any{"team-b"}}}),
				hostCPC(t, "b", hostOpts{allowed: map[string]any{"names": []any{"team-a"}}}),
			},
			want: want{host: "b", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "b"},
				condition:   "STATUS_CONDITION_TRUE/Placed: placed on host b: 23552 MiB of memory and 127 vCPUs left there once placed (of 2 hosts considered)",
				requirement: map[string]string{}},
		},
		"AdmittedBySelectorAsksForNamespace": {
			reason: "A host admitting namespaces by label makes the function ask for the Proxy's Namespace before placing.",
			xr:     placedXR,
			hosts:  []map[string]any{hostCPC(t, "a", hostOpts{allowed: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"tier": "gold"}}}})},
			want: want{
				status:      map[string]any{"phase": PhasePending, "message": msgChoosing},
				condition:   "STATUS_CONDITION_UNKNOWN/Choosing: choosing a host",
				requirement: map[string]string{},
			},
		},
		"AdmittedBySelector": {
			reason: "With the Namespace's labels, a host whose selector matches them is used, one whose selector does not is skipped.",
			xr:     placedXR,
			hosts: []map[string]any{
				hostCPC(t, "a", hostOpts{memGiB: 64, allowed: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"tier": "gold"}}}}),
				hostCPC(t, "b", hostOpts{allowed: map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"tier": "silver"}}}}),
			},
			nsLabels: map[string]any{"tier": "silver"},
			want: want{host: "b", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "b"},
				condition:   "STATUS_CONDITION_TRUE/Placed: placed on host b: 23552 MiB of memory and 127 vCPUs left there once placed (of 2 hosts considered)",
				requirement: map[string]string{}},
		},
		"DefaultAttachmentGranted": {
			reason: "With the platform's defaultAttachment, a host that does not grant it (its default is libvirt's network) is skipped however much room it has; one whose defaults name it, or whose attachments grant it, is used.",
			xr:     placedXR,
			input:  "apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1\nkind: ProxyPolicy\ndefaultAttachment: {bridge: br0}\n",
			hosts: []map[string]any{
				hostCPC(t, "a", hostOpts{memGiB: 64}),
				hostCPC(t, "b", hostOpts{memGiB: 32, attachments: []any{map[string]any{"bridges": []any{map[string]any{"name": "br0"}}}}}),
				hostCPC(t, "c", hostOpts{defaults: map[string]any{"bridge": "br0"}}),
			},
			want: want{host: "b", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "b"},
				condition:   "STATUS_CONDITION_TRUE/Placed: placed on host b: 48128 MiB of memory and 127 vCPUs left there once placed (of 3 hosts considered)",
				requirement: map[string]string{}},
		},
		"DefaultAttachmentNotGranted": {
			reason: "When no host grants the platform's defaultAttachment to the namespace, nothing is composed and each host says so.",
			xr:     placedXR,
			input:  "apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1\nkind: ProxyPolicy\ndefaultAttachment: {network: egress}\n",
			hosts: []map[string]any{
				hostCPC(t, "a", hostOpts{}),
				hostCPC(t, "b", hostOpts{attachments: []any{map[string]any{"namespaces": map[string]any{"names": []any{"team-b"}}, "networks": []any{"egress"}}}}),
			},
			want: want{
				status: map[string]any{"phase": PhasePending, "message": "no host fits: a: does not grant network egress (the platform's defaultAttachment) to namespace team-a (spec.defaults, spec.attachments); " +
					"b: does not grant network egress (the platform's defaultAttachment) to namespace team-a (spec.defaults, spec.attachments)"},
				condition: "STATUS_CONDITION_FALSE/NoHostFits: no host fits: a: does not grant network egress (the platform's defaultAttachment) to namespace team-a (spec.defaults, spec.attachments); " +
					"b: does not grant network egress (the platform's defaultAttachment) to namespace team-a (spec.defaults, spec.attachments)",
				requirement: map[string]string{},
			},
		},
		"DefaultAttachmentGrantedBySelectorAsksForNamespace": {
			reason: "A host granting the defaultAttachment to namespaces by label makes the function ask for the Proxy's Namespace before placing.",
			xr:     placedXR,
			input:  "apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1\nkind: ProxyPolicy\ndefaultAttachment: {network: egress}\n",
			hosts: []map[string]any{hostCPC(t, "a", hostOpts{attachments: []any{map[string]any{
				"namespaces": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"tier": "gold"}}}, "networks": []any{"egress"}}}})},
			want: want{
				status:      map[string]any{"phase": PhasePending, "message": msgChoosing},
				condition:   "STATUS_CONDITION_UNKNOWN/Choosing: choosing a host",
				requirement: map[string]string{},
			},
		},
		"DefaultAttachmentGrantedBySelector": {
			reason: "With the Namespace's labels, a host granting the defaultAttachment to them is used.",
			xr:     placedXR,
			input:  "apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1\nkind: ProxyPolicy\ndefaultAttachment: {network: egress}\n",
			hosts: []map[string]any{
				hostCPC(t, "a", hostOpts{memGiB: 64, attachments: []any{map[string]any{
					"namespaces": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"tier": "gold"}}}, "networks": []any{"egress"}}}}),
				hostCPC(t, "b", hostOpts{attachments: []any{map[string]any{
					"namespaces": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"tier": "silver"}}}, "networks": []any{"egress"}}}}),
			},
			nsLabels: map[string]any{"tier": "silver"},
			want: want{host: "b", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "b"},
				condition:   "STATUS_CONDITION_TRUE/Placed: placed on host b: 23552 MiB of memory and 127 vCPUs left there once placed (of 2 hosts considered)",
				requirement: map[string]string{}},
		},
		"ImageHostFull": {
			reason:  "When the image's host has no room, no host fits, and each says why.",
			xr:      placedXR,
			hosts:   []map[string]any{hostCPC(t, "a", hostOpts{}), hostCPC(t, "b", hostOpts{memGiB: 1, usedMiB: 512, memoryRatio: "1"})},
			imageOn: "b",
			want: want{
				status:      map[string]any{"phase": PhasePending, "message": "no host fits: a: BaseImage debian-12 is on host b; b: needs 1024 MiB of memory, 512 MiB left"},
				condition:   "STATUS_CONDITION_FALSE/NoHostFits: no host fits: a: BaseImage debian-12 is on host b; b: needs 1024 MiB of memory, 512 MiB left",
				requirement: map[string]string{},
			},
		},
		"NothingFits": {
			reason: "When no host fits, nothing is composed, and status and the Placed condition say why for each host.",
			xr:     placedXR,
			hosts: []map[string]any{
				hostCPC(t, "a", hostOpts{memGiB: 1, memoryRatio: "0.5"}),
				hostCPC(t, "b", hostOpts{cordoned: true}),
			},
			want: want{
				status:      map[string]any{"phase": PhasePending, "message": "no host fits: a: needs 1024 MiB of memory, 512 MiB left; b: cordoned (spec.unschedulable)"},
				condition:   "STATUS_CONDITION_FALSE/NoHostFits: no host fits: a: needs 1024 MiB of memory, 512 MiB left; b: cordoned (spec.unschedulable)",
				requirement: map[string]string{},
			},
		},
		"NoHostMatchesSelector": {
			reason: "A selector no host matches says so.",
			xr:     placedXR + "  hostSelector: {zone: east}\n",
			hosts:  []map[string]any{},
			want: want{
				status:      map[string]any{"phase": PhasePending, "message": "no host (ClusterProviderConfig) has the labels zone=east"},
				condition:   "STATUS_CONDITION_FALSE/NoHostFits: no host (ClusterProviderConfig) has the labels zone=east",
				requirement: map[string]string{"zone": "east"},
			},
		},
		"SelectorWithPlatform": {
			reason: "The Proxy's hostSelector and the platform's are asked for together.",
			xr:     placedXR + "  hostSelector: {zone: east}\n",
			input:  "apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1\nkind: ProxyPolicy\nplacement: {hostSelector: {tier: proxies}}\n",
			hosts:  []map[string]any{hostCPC(t, "e1", hostOpts{labels: map[string]string{"zone": "east", "tier": "proxies"}})},
			want: want{host: "e1", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "e1"},
				condition:   "STATUS_CONDITION_TRUE/Placed: placed on host e1: 23552 MiB of memory and 127 vCPUs left there once placed (of 1 hosts considered)",
				requirement: map[string]string{"zone": "east", "tier": "proxies"}},
		},
		"SelectorConflict": {
			reason: "A hostSelector that contradicts the platform's is refused.",
			xr:     placedXR + "  hostSelector: {tier: web}\n",
			input:  "apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1\nkind: ProxyPolicy\nplacement: {hostSelector: {tier: proxies}}\n",
			want:   want{fatal: true},
		},
		"StickyFromStatus": {
			reason: "A placed Proxy stays on its host even when it is now full and another has room; the hosts are asked for only to tell whether its host evacuates.",
			xr:     placedXR + "status: {host: a}\n",
			hosts:  []map[string]any{hostCPC(t, "a", hostOpts{memGiB: 1, usedMiB: 1024}), hostCPC(t, "b", hostOpts{})},
			want: want{host: "a", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "a"},
				condition: "STATUS_CONDITION_TRUE/Placed: placed on host a", requirement: map[string]string{}},
		},
		"StickyFromComposed": {
			reason: "With status lost, the host the composed KVMDomain names is kept.",
			xr:     placedXR,
			observed: map[string]string{
				ResourceDomain: domainOn("a"),
			},
			hosts: []map[string]any{hostCPC(t, "b", hostOpts{})},
			want: want{host: "a", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "a"},
				condition: "STATUS_CONDITION_TRUE/Placed: placed on host a", requirement: map[string]string{}},
		},
		"StickyCordoned": {
			reason: "A cordon alone moves nothing: the Proxy stays on its cordoned host.",
			xr:     placedXR + "status: {host: a}\n",
			hosts:  []map[string]any{hostCPC(t, "a", hostOpts{cordoned: true}), hostCPC(t, "b", hostOpts{})},
			want: want{host: "a", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "a"},
				condition: "STATUS_CONDITION_TRUE/Placed: placed on host a", requirement: map[string]string{}},
		},
		"EvacuateMoves": {
			reason: "A Proxy whose host evacuates is placed anew on another host (its new generation there takes over once Ready).",
			xr:     placedXR + "status: {host: a}\n",
			observed: map[string]string{
				ResourceDomain: domainOn("a"),
			},
			hosts: []map[string]any{hostCPC(t, "a", hostOpts{cordoned: true, evacuate: true}), hostCPC(t, "b", hostOpts{})},
			want: want{host: "b", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "b"},
				condition:   "STATUS_CONDITION_TRUE/Placed: host a is evacuating: moving to host b (the VM there takes over once Ready). placed on host b: 23552 MiB of memory and 127 vCPUs left there once placed (of 2 hosts considered)",
				requirement: map[string]string{}},
		},
		"EvacuateMidMove": {
			reason: "While it moves, its generation on the host it moves to holds the placement: the choice does not flap as that host fills.",
			xr:     placedXR + "status: {host: a}\n",
			observed: map[string]string{
				ResourceDomain:               domainOn("a"),
				ResourceDomain + "-0a1b2c3d": domainOn("c"),
			},
			hosts: []map[string]any{hostCPC(t, "a", hostOpts{cordoned: true, evacuate: true}), hostCPC(t, "b", hostOpts{}), hostCPC(t, "c", hostOpts{memGiB: 2, usedMiB: 1024})},
			want: want{host: "c", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "c"},
				condition: "STATUS_CONDITION_TRUE/Placed: placed on host c", requirement: map[string]string{}},
		},
		"EvacuateBlocked": {
			reason: "When no other host fits, the Proxy stays on its evacuating host, serving, and Placed says why.",
			xr:     placedXR + "status: {host: a}\n",
			observed: map[string]string{
				ResourceDomain: domainOn("a"),
			},
			hosts: []map[string]any{hostCPC(t, "a", hostOpts{cordoned: true, evacuate: true}), hostCPC(t, "b", hostOpts{memGiB: 1, usedMiB: 512, memoryRatio: "1"})},
			want: want{host: "a", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "a"},
				condition:   "STATUS_CONDITION_FALSE/EvacuationBlocked: host a is evacuating, but no other host fits: no host fits: a: evacuating (spec.evacuate); b: needs 1024 MiB of memory, 512 MiB left",
				requirement: map[string]string{}},
		},
		"EvacuateNotKnownYet": {
			reason: "Before Crossplane gave the hosts, a placed Proxy stays where it is and asks for them.",
			xr:     placedXR + "status: {host: a}\n",
			want: want{host: "a", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "a"},
				condition: "STATUS_CONDITION_TRUE/Placed: placed on host a", requirement: map[string]string{}},
		},
		"EvacuatePinned": {
			reason: "spec.host pins the Proxy: an evacuating host does not move it.",
			xr:     placedXR + "  host: a\n",
			hosts:  []map[string]any{hostCPC(t, "a", hostOpts{cordoned: true, evacuate: true}), hostCPC(t, "b", hostOpts{})},
			want: want{host: "a", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "a"},
				condition: "STATUS_CONDITION_TRUE/HostGiven: spec.host names host a"},
		},
		"ExplicitHost": {
			reason: "spec.host is used as given: no placement, no requirement, even on a host that is cordoned or full (the provider refuses there).",
			xr:     placedXR + "  host: lab\n",
			hosts:  []map[string]any{hostCPC(t, "lab", hostOpts{cordoned: true})},
			want: want{host: "lab", composed: all, status: map[string]any{"phase": PhaseCreating, "host": "lab"},
				condition: "STATUS_CONDITION_TRUE/HostGiven: spec.host names host lab"},
		},
		"HostAndSelector": {
			reason: "host and hostSelector together are refused.",
			xr:     placedXR + "  host: lab\n  hostSelector: {zone: east}\n",
			want:   want{fatal: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := newRequest(t, tc.xr, tc.observed)
			withHosts(t, req, tc.hosts...)
			if tc.imageOn != "" {
				ns := tc.imageNS
				if ns == "" {
					ns = "team-a"
				}
				withImage(t, req, ns, "debian-12", tc.imageOn)
			}
			if tc.nsLabels != nil {
				nsObj := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "team-a", "labels": tc.nsLabels}}
				req.RequiredResources[RequirementNamespace] = &fnv1.Resources{Items: []*fnv1.Resource{{Resource: structOf(t, nsObj)}}}
			}
			if tc.input != "" {
				req.Input = st(t, tc.input)
			}
			rsp := run(t, req)
			if got := len(fatals(rsp)) > 0; got != tc.want.fatal {
				t.Fatalf("%s\nfatal: %v, want %v (%v)", tc.reason, got, tc.want.fatal, fatals(rsp))
			}
			if tc.want.fatal {
				return
			}
			got := want{composed: composedNames(rsp), condition: placedCondition(rsp), status: map[string]any{}}
			// Not placed: the XR is said not ready (Crossplane would call an XR that composes
			// nothing Available); placed: left to the composed resources.
			wantReady := fnv1.Ready_READY_UNSPECIFIED
			if tc.want.host == "" {
				wantReady = fnv1.Ready_READY_FALSE
			}
			if r := rsp.GetDesired().GetComposite().GetReady(); r != wantReady {
				t.Errorf("%s\nthe XR's desired readiness is %v, want %v", tc.reason, r, wantReady)
			}
			if d, ok := desired(rsp)[ResourceDomain]; ok {
				got.host, _ = d["spec"].(map[string]any)["providerConfigRef"].(map[string]any)["name"].(string)
			}
			s := xrStatus(rsp)
			for k := range tc.want.status {
				if v, ok := s[k]; ok {
					got.status[k] = v
				}
			}
			if r := rsp.GetRequirements().GetResources()[RequirementHosts]; r != nil {
				got.requirement = map[string]string{}
				for k, v := range r.GetMatchLabels().GetLabels() {
					got.requirement[k] = v
				}
				if r.GetKind() != "ClusterProviderConfig" || r.GetApiVersion() != "kvm.crossplane.io/v1alpha1" {
					t.Errorf("hosts are asked for as %s %s", r.GetApiVersion(), r.GetKind())
				}
				if n := rsp.GetRequirements().GetResources()[RequirementNamespace]; n != nil && (n.GetKind() != "Namespace" || n.GetMatchName() != "team-a") {
					t.Errorf("the Namespace is asked for as %v", n)
				}
				if (strings.HasPrefix(name, "AdmittedBySelector") || strings.HasPrefix(name, "DefaultAttachmentGrantedBySelector")) &&
					rsp.GetRequirements().GetResources()[RequirementNamespace] == nil {
					t.Errorf("%s\nthe Namespace is not asked for", tc.reason)
				}
				img := rsp.GetRequirements().GetResources()[RequirementBaseImage]
				if img.GetKind() != "BaseImage" || img.GetMatchName() != "debian-12" || img.GetNamespace() != "team-a" {
					t.Errorf("the shared BaseImage is asked for as %v", img)
				}
			}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), protocmp.Transform()); d != "" {
				t.Errorf("%s\n-want +got:\n%s", tc.reason, d)
			}
		})
	}
}

// TestPlacementRace is the race of two Proxies created in the same second: two function runs
// see the same hosts (the host status controller's last poll), so both choose the host with
// most room even when it has room for one only. The function cannot know of the other run; the
// provider's check at definition time (internal/controller/kvmdomain room.go, under the host's
// lock) refuses the second KVMDomain as host full (TestRoomGuardRace there).
func TestPlacementRace(t *testing.T) {
	view := []map[string]any{hostCPC(t, "a", hostOpts{memGiB: 2, usedMiB: 2048, memoryRatio: "1.5"}), hostCPC(t, "b", hostOpts{memGiB: 1, usedMiB: 768, memoryRatio: "1"})}
	var got []string
	for _, name := range []string{"p1", "p2"} {
		req := newRequest(t, `
apiVersion: platform.kvm.crossplane.io/v1alpha1
kind: Proxy
metadata: {name: `+name+`, namespace: team-a}
spec:
  image: {baseImageName: debian-12}
  memoryMiB: 1024
`, nil)
		withHosts(t, req, view...)
		rsp := run(t, req)
		mustNoFatal(t, rsp)
		got = append(got, xrStatus(rsp)["host"].(string))
	}
	if d := cmp.Diff([]string{"a", "a"}, got); d != "" {
		t.Errorf("two runs from the same view (-want +got):\n%s", d)
	}
}
