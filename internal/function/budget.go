package function

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/request"
	"github.com/crossplane/function-sdk-go/resource/composite"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
)

// The required resources the budget counts: every Proxy and every ProxyClaim of the namespace.
const (
	requiredProxies = "budget-proxies"
	requiredClaims  = "budget-proxyclaims"
	proxyAPIVersion = "platform.kvm.crossplane.io/v1alpha1"
)

// budgetFor is the namespace's budget, or nil when it has none.
func budgetFor(b *ppv1.Budgets, ns string) *ppv1.Budget {
	if b == nil {
		return nil
	}
	for i := range b.Namespaces {
		if b.Namespaces[i].Namespace == ns {
			return &b.Namespaces[i].Budget
		}
	}
	return b.Default
}

// holder is one Proxy (or ProxyClaim) of the namespace and what it holds.
type holder struct {
	created    time.Time
	kind, name string
	vcpu, mem  int64
}

// checkBudget refuses a Proxy that would take the namespace past its budget. It counts the
// namespace's Proxies and ProxyClaims (required resources) in the order they were created and
// admits this one when it and every one created before it fit: two Proxies created at once
// are ordered the same way by both runs, so only the first takes the last of a budget.
// pending is true while Crossplane has not yet sent the required resources: the function then
// asks for them and composes nothing this round.
func checkBudget(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, budgets *ppv1.Budgets, xr *composite.Unstructured, p Proxy, ns string) (pending bool, err error) {
	b := budgetFor(budgets, ns)
	if b == nil || (b.MaxVCPU == nil && b.MaxMemoryMiB == nil && b.MaxProxies == nil) {
		return false, nil
	}
	// Every response asks for them, so that Crossplane sees the requirements stable and keeps
	// the response made with them.
	requireHolders(rsp, ns)
	all, pending, err := holders(req, ns)
	if err != nil || pending {
		return pending, err
	}
	// This Proxy is the Proxy itself, or for a legacy XR its claim. Its own spec counts as it
	// is now; one the list lacks (not seen yet) comes last.
	// Every replica is a VM: a Proxy of two counts twice its vCPUs and memory.
	self := holder{created: time.Unix(1<<40, 0), kind: "Proxy", name: xr.GetName(), vcpu: int64(p.VCPU) * int64(p.Replicas), mem: int64(p.MemoryMiB) * int64(p.Replicas)}
	if xr.GetNamespace() == "" {
		self.kind = "ProxyClaim"
		self.name, _ = xr.GetString("spec.claimRef.name")
	}
	return false, admit(b, ns, all, self)
}

// holders are the namespace's Proxies and ProxyClaims as Crossplane sent them; pending while
// it has not sent them yet.
func holders(req *fnv1.RunFunctionRequest, ns string) ([]holder, bool, error) {
	var all []holder
	pending := false
	for name, kind := range map[string]string{requiredProxies: "Proxy", requiredClaims: "ProxyClaim"} {
		items, ok, err := request.GetRequiredResource(req, name)
		if err != nil {
			return nil, false, errors.Wrapf(err, "cannot read the required %ss", kind)
		}
		pending = pending || !ok
		for _, it := range items {
			u := it.Resource
			if u.GetKind() != kind || u.GetNamespace() != ns {
				continue
			}
			replicas := intOr(unstructuredInt(u.Object, "spec", "replicas"), DefaultReplicas)
			all = append(all, holder{created: u.GetCreationTimestamp().Time, kind: kind, name: u.GetName(),
				vcpu: intOr(unstructuredInt(u.Object, "spec", "vcpu"), DefaultVCPU) * replicas,
				mem:  intOr(unstructuredInt(u.Object, "spec", "memoryMiB"), DefaultMemoryMiB) * replicas})
		}
	}
	return all, pending, nil
}

// requireHolders asks Crossplane for every Proxy and ProxyClaim of the namespace.
func requireHolders(rsp *fnv1.RunFunctionResponse, ns string) {
	asked := requirements(rsp)
	for name, kind := range map[string]string{requiredProxies: "Proxy", requiredClaims: "ProxyClaim"} {
		asked[name] = &fnv1.ResourceSelector{
			ApiVersion: proxyAPIVersion, Kind: kind, Namespace: &ns,
			Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{}}},
		}
	}
}

// admit orders the namespace's holders by creation (then kind and name) and says whether self
// and every holder before it fit the budget.
func admit(b *ppv1.Budget, ns string, all []holder, self holder) error {
	ordered := []holder{}
	for _, h := range all {
		if h.kind == self.kind && h.name == self.name {
			self.created = h.created
			continue
		}
		ordered = append(ordered, h)
	}
	ordered = append(ordered, self)
	sort.SliceStable(ordered, func(i, j int) bool {
		a, b := ordered[i], ordered[j]
		if !a.created.Equal(b.created) {
			return a.created.Before(b.created)
		}
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		return a.name < b.name
	})
	var before holder
	n := int64(0)
	for _, h := range ordered {
		if h.kind == self.kind && h.name == self.name {
			break
		}
		before.vcpu += h.vcpu
		before.mem += h.mem
		n++
	}
	var errs []string
	over := func(field, what string, limit *int64, used, asks int64) {
		if limit != nil && used+asks > *limit {
			errs = append(errs, fmt.Sprintf("%s: namespace %s's budget is %d %s (policy budgets); the Proxies created before this one hold %d and this one asks for %d", field, ns, *limit, what, used, asks))
		}
	}
	over("spec.vcpu", "vCPUs", b.MaxVCPU, before.vcpu, self.vcpu)
	over("spec.memoryMiB", "MiB of memory", b.MaxMemoryMiB, before.mem, self.mem)
	if b.MaxProxies != nil && n+1 > *b.MaxProxies {
		errs = append(errs, fmt.Sprintf("namespace %s's budget is %d Proxies (policy budgets); %d were created before this one", ns, *b.MaxProxies, n))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// unstructuredInt reads an integer field (a JSON number: int64 or float64), nil when missing.
func unstructuredInt(obj map[string]any, path ...string) *int64 {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		if cur, ok = m[p]; !ok {
			return nil
		}
	}
	switch v := cur.(type) {
	case int64:
		return &v
	case float64:
		i := int64(v)
		return &i
	}
	return nil
}
