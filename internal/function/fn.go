// Package function is function-kvm-proxy, the composition function behind the Proxy API
// (package/configuration): an application team asks for a Proxy in its namespace and gets
// a small VM running squid.
//
// From a Proxy (v2, namespaced) or an XProxy created by a ProxyClaim (v1, LegacyCluster) it
// composes, all in the proxy's namespace and all on one ClusterProviderConfig: spec.host, or,
// when the Proxy leaves it out, the host placement chose (placement.go; status.host):
//
//   - base-image: a BaseImage <xr>-image, only when spec.image names a url and sha256;
//     otherwise the domain boots the shared BaseImage spec.image.baseImageName;
//   - seed: a SeedVolume <xr>-seed whose #cloud-config configures and starts squid;
//   - domain: a KVMDomain <xr> with a readiness probe through the proxy;
//   - secret: a Secret <xr>-proxy with keys url, host and port, once the guest's address is
//     known (see below).
//
// It writes status.phase, status.secretName and, once known, status.ip and status.url back
// to the XR, and the same url, host and port as connection details (claims of legacy XRs
// can publish them with writeConnectionSecretToRef; v2 XRs drop them).
//
// The Secret is composed only once the KVMDomain reports an IPv4 address, so a Pod that
// mounts it waits for the proxy instead of starting with an empty address. Once composed it
// stays: while the address is unknown again (a reboot), it keeps the last known data.
//
// The namespace of every composed resource is the XR's own namespace, or for a legacy XR
// the namespace of its claim (spec.claimRef.namespace). A namespace given anywhere else
// in the spec is ignored, so a claim cannot compose into another team's namespace.
//
// An invalid spec (an unparsable CIDR, a port out of range, both or neither image ways, a
// multi-line directive) is a fatal result naming every bad field; nothing is composed. So is a
// Proxy that breaks the platform's ProxyPolicy, the step's input (rules.go, budget.go).
package function

import (
	"context"
	"net/netip"
	"strings"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/crossplane/function-sdk-go/logging"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/request"
	"github.com/crossplane/function-sdk-go/resource"
	"github.com/crossplane/function-sdk-go/resource/composed"
	"github.com/crossplane/function-sdk-go/resource/composite"
	"github.com/crossplane/function-sdk-go/response"
)

// Phases reported in the XR's status.phase.
const (
	PhaseCreating = "Creating" // the KVMDomain is not observed yet, or waits for its inputs
	PhaseBooting  = "Booting"  // the domain exists, its guest has no address yet
	PhaseProbing  = "Probing"  // the guest has an address, squid does not answer the probe yet
	PhaseReady    = "Ready"    // the KVMDomain is Ready: squid answers
	PhaseStopped  = "Stopped"  // the domain is shut off
	PhaseError    = "Error"    // the KVMDomain cannot be reconciled (see its Synced condition)
)

// Function is the composition function.
type Function struct {
	fnv1.UnimplementedFunctionRunnerServiceServer

	log logging.Logger
	now func() time.Time
}

// An Option configures the function.
type Option func(*Function)

// WithClock sets the clock the function reads the time from (tests), instead of the system's.
func WithClock(now func() time.Time) Option {
	return func(f *Function) { f.now = now }
}

// New returns the function.
func New(log logging.Logger, opts ...Option) *Function {
	f := &Function{log: log, now: time.Now}
	for _, o := range opts {
		o(f)
	}
	return f
}

// RunFunction composes a proxy.
func (f *Function) RunFunction(_ context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	// response.To shares req's desired state with the response; keep a copy to fall back on.
	in := proto.Clone(req).(*fnv1.RunFunctionRequest) // Clone keeps the type.
	rsp := response.To(req, response.DefaultTTL)
	if err := f.compose(req, rsp); err != nil {
		f.log.Debug("cannot compose proxy", "tag", req.GetMeta().GetTag(), "error", err.Error())
		// Start over from the request, so that nothing half-built leaves this function.
		rsp = response.To(in, response.DefaultTTL)
		response.Fatal(rsp, err)
		return rsp, nil
	}
	f.log.Debug("composed proxy", "tag", req.GetMeta().GetTag(), "resources", len(rsp.GetDesired().GetResources()))
	return rsp, nil
}

func (f *Function) compose(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) error { //nolint:gocyclo // one pass over the pipeline: read, validate, compose each resource, write back; each step only returns its error
	oxr, err := request.GetObservedCompositeResource(req)
	if err != nil {
		return errors.Wrap(err, "cannot get the observed composite resource")
	}
	xr := oxr.Resource
	what := xr.GetKind() + " " + xr.GetName()
	if xr.GetNamespace() != "" {
		what = xr.GetKind() + " " + xr.GetNamespace() + "/" + xr.GetName()
	}

	pol, err := readPolicy(req) // the platform's policy: placement and rules use it
	if err != nil {
		return err
	}
	var spec ProxySpec
	if err := xr.GetValueInto("spec", &spec); err != nil {
		return errors.Wrapf(err, "invalid %s: cannot read spec", what)
	}
	p, err := spec.Validate()
	if err != nil {
		return errors.Wrapf(err, "invalid %s", what)
	}
	if err := applyRules(pol.Rules, &p, what); err != nil {
		return err
	}
	att, err := resolveAttachment(pol.DefaultAttachment)
	if err != nil {
		return err
	}
	p.Network, p.Bridge = att.Network, att.Bridge
	ns, err := targetNamespace(xr)
	if err != nil {
		return errors.Wrapf(err, "invalid %s", what)
	}
	if pending, err := checkBudget(req, rsp, pol.Budgets, xr, p, ns); pending || err != nil {
		return errors.Wrapf(err, "%s breaks the platform's policy", what) // nil while the budget's resources are pending
	}
	n := NamesFor(baseName(xr))

	observed, err := request.GetObservedComposedResources(req)
	if err != nil {
		return errors.Wrap(err, "cannot get the observed composed resources")
	}
	desired, err := request.GetDesiredComposedResources(req)
	if err != nil {
		return errors.Wrap(err, "cannot get the desired composed resources")
	}
	dxr, err := request.GetDesiredCompositeResource(req)
	if err != nil {
		return errors.Wrap(err, "cannot get the desired composite resource")
	}

	// Which hosts the replicas leave, and which are not Ready, read once for replica 0 and the
	// others (nothing before Crossplane gave the hosts).
	view, err := readHosts(req, pol, f.now())
	if err != nil {
		return err
	}
	if view.recheck > 0 && view.recheck < response.DefaultTTL {
		// A host that is not Ready reaches failoverAfter before Crossplane would call again.
		rsp.Meta.Ttl = durationpb.New(view.recheck)
	}
	w, err := locate(req, xr, spec, p, ns, pol, observed, view)
	if err != nil {
		return errors.Wrapf(err, "invalid %s", what)
	}
	if w.selector != nil {
		require(rsp, w)
	}
	if w.host == "" {
		return unplaced(rsp, dxr, w, n)
	}
	p.Host = w.host
	at, rw, err := placeReplicas(req, xr, spec, p, ns, pol, observed, w.host, view)
	if err != nil {
		return errors.Wrapf(err, "invalid %s", what)
	}
	if rw != nil && rw.selector != nil {
		require(rsp, *rw)
	}
	at[0].left = w.left
	if err := queueMoves(req, rsp, pol, view, ns, xr.GetName(), observed, at); err != nil {
		return err
	}
	if w.reason == ReasonEvacuationBlocked {
		at[0].reason, at[0].blocked = w.reason, w.message
	}
	switch ok, reason, msg := placedMessage(at, w.message); {
	case ok:
		response.ConditionTrue(rsp, ConditionPlaced, w.reason).WithMessage(msg).TargetCompositeAndClaim()
	case reason == ReasonChoosing:
		response.ConditionUnknown(rsp, ConditionPlaced, reason).WithMessage(msg).TargetCompositeAndClaim()
	default:
		response.ConditionFalse(rsp, ConditionPlaced, reason).WithMessage(msg).TargetCompositeAndClaim()
		response.Warning(rsp, errors.New(msg)).WithReason(reason).TargetCompositeAndClaim()
	}

	userData, err := UserData(p, n.Domain)
	if err != nil {
		return err
	}
	if err := f.composeGenerations(rollIn{xr: xr, dxr: dxr, pol: pol, p: p, at: at, hosts: view, n: n, ns: ns, base: baseName(xr), userData: userData,
		observed: observed, desired: desired}, rsp); err != nil {
		return err
	}
	return nil
}

// ConditionProxyReady is the condition the function sets on the Proxy (and its claim): True
// once squid answers through it, else False with the phase as its reason and, as its message,
// what blocks it (the blocking resource's own message). Crossplane reserves Ready and Synced
// for itself and drops them when a function sets them, so this is the one to wait for:
// `kubectl wait proxy/web --for=condition=ProxyReady`. Crossplane's own Ready says which
// composed resources are not ready; Synced=False carries a refused spec (a fatal result).
const ConditionProxyReady = "ProxyReady"

// proxyReady sets ConditionProxyReady for phase and message.
func proxyReady(rsp *fnv1.RunFunctionResponse, phase, message string) {
	if phase == PhaseReady {
		response.ConditionTrue(rsp, ConditionProxyReady, phase).WithMessage("squid answers through the proxy").TargetCompositeAndClaim()
		return
	}
	if message == "" {
		message = phaseMessages[phase]
	}
	response.ConditionFalse(rsp, ConditionProxyReady, phase).WithMessage(message).TargetCompositeAndClaim()
}

// phaseMessages say what a phase means when the blocking resource said nothing.
var phaseMessages = map[string]string{
	PhaseCreating: "the VM and its inputs are being created on the host",
	PhaseBooting:  "the VM runs; its guest has no address yet",
	PhaseProbing:  "the guest has an address; squid does not answer through it yet",
	PhaseStopped:  "the VM is shut off",
	PhaseError:    "the KVMDomain cannot be reconciled: see its Synced condition",
	PhasePending:  "no host chosen yet",
}

// unplaced answers for a Proxy without a host yet: nothing is composed (what earlier steps
// desire is kept), status says why (phase Pending), and so does the Placed condition; when no
// host fits, a warning (an event on the Proxy) too. The XR is said not ready: with nothing
// composed, Crossplane would otherwise call it Available.
func unplaced(rsp *fnv1.RunFunctionResponse, dxr *resource.Composite, w where, n Names) error {
	status := map[string]any{"phase": PhasePending, "message": w.message, "secretName": n.Secret}
	for k, v := range status {
		if err := dxr.Resource.SetValue("status."+k, v); err != nil {
			return errors.Wrapf(err, "cannot set status.%s", k)
		}
	}
	dxr.Ready = resource.ReadyFalse
	if err := response.SetDesiredCompositeResource(rsp, dxr); err != nil {
		return errors.Wrap(err, "cannot set the desired composite resource")
	}
	proxyReady(rsp, PhasePending, w.message)
	if w.reason == ReasonChoosing {
		response.ConditionUnknown(rsp, ConditionPlaced, w.reason).WithMessage(w.message).TargetCompositeAndClaim()
		return nil
	}
	response.ConditionFalse(rsp, ConditionPlaced, w.reason).WithMessage(w.message).TargetCompositeAndClaim()
	response.Warning(rsp, errors.New(w.message)).WithReason(w.reason).TargetCompositeAndClaim()
	return nil
}

// baseName is the name the composed resources are named after: the XR's own for a v2
// Proxy, and the claim's for a legacy XR made by a claim, so that the application team
// finds <claim>-proxy, not a Secret named after a generated XR name it never sees. Claim
// names are unique in their namespace, which is where the resources go. A Proxy and a
// ProxyClaim of the same name in one namespace would want the same names; Crossplane then
// refuses to take over the other one's resources and says so on the second.
func baseName(xr *composite.Unstructured) string {
	if xr.GetNamespace() == "" {
		if c, _ := xr.GetString("spec.claimRef.name"); c != "" && len(validation.IsDNS1123Subdomain(c)) == 0 {
			return c
		}
	}
	return xr.GetName()
}

// targetNamespace is the namespace of the composed resources: the XR's own (a v2
// namespaced Proxy) or, for a cluster-scoped legacy XR, its claim's. Nothing a user writes
// in the spec can change it.
func targetNamespace(xr *composite.Unstructured) (string, error) {
	ns := xr.GetNamespace()
	if ns == "" {
		ns, _ = xr.GetString("spec.claimRef.namespace")
		if ns == "" {
			return "", errors.Errorf("a cluster-scoped %s composes into its claim's namespace, but it has no spec.claimRef.namespace: create it through its claim", xr.GetKind())
		}
	}
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return "", errors.Errorf("%q is not a valid namespace: %s", ns, msgs[0])
	}
	return ns, nil
}

// state is a phase and why: the blocking resource's own message.
type state struct {
	phase   string
	message string
}

type condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

// conditionsOf reads the conditions of an observed composed resource.
func conditionsOf(o resource.ObservedComposed) []condition {
	var conds []condition
	_ = o.Resource.GetValueInto("status.conditions", &conds)
	return conds
}

// cond returns the condition of type typ, or a zero one.
func cond(conds []condition, typ string) condition {
	for _, c := range conds {
		if c.Type == typ {
			return c
		}
	}
	return condition{}
}

// inputMessage is the Ready message of the input a KVMDomain waits for ("SeedVolume web-seed"),
// when that input is one of this Proxy's composed resources and says something.
func inputMessage(observed map[resource.Name]resource.ObservedComposed, waiting string, k genKeys) string {
	kind, _, _ := strings.Cut(waiting, " ")
	name := map[string]resource.Name{"SeedVolume": k.Seed, "BaseImage": k.BaseImage}[kind]
	o, ok := observed[name]
	if name == "" || !ok {
		return ""
	}
	for _, typ := range []string{"Synced", "Ready"} {
		if c := cond(conditionsOf(o), typ); c.Status == "False" && c.Message != "" {
			return c.Message
		}
	}
	return ""
}

// domainPhase is the phase (and its message) the observed KVMDomain d puts the Proxy in.
func domainPhase(observed map[resource.Name]resource.ObservedComposed, d resource.ObservedComposed, hasIP, composesImage bool, k genKeys) (phase, message string) {
	st := state{}
	conds := conditionsOf(d)
	ready, synced := cond(conds, "Ready"), cond(conds, "Synced")
	vmState, _ := d.Resource.GetString("status.atProvider.state")
	waiting, _ := d.Resource.GetString("status.atProvider.waitingFor")
	switch {
	case ready.Status == "True":
		st.phase = PhaseReady
	case waiting != "":
		// The domain waits for its SeedVolume or BaseImage to become Ready: still creating.
		st.phase, st.message = PhaseCreating, "waiting for "+waiting+" to be Ready"
		if m := inputMessage(observed, waiting, k); m != "" {
			st.message += ": " + m
		}
	case synced.Status == "False" && vmState == "" && unborn(observed, composesImage, k) != "":
		// The KVMDomain was composed together with its seed (and image) and cannot resolve
		// them until they exist and are Ready: still creating, not an error.
		pending := unborn(observed, composesImage, k)
		st.phase, st.message = PhaseCreating, "waiting for "+pending
		if m := inputMessage(observed, strings.TrimPrefix(pending, "its "), k); m != "" {
			st.message += ": " + m
		}
	case synced.Status == "False":
		st.phase, st.message = PhaseError, synced.Message
	case vmState == "":
		// Not on the host yet (the KVMDomain was just composed): still creating, never
		// Booting before the domain exists.
		st.phase = PhaseCreating
	case vmState == "ShutOff":
		st.phase, st.message = PhaseStopped, ready.Message
	case hasIP:
		st.phase, st.message = PhaseProbing, ready.Message
	default:
		st.phase, st.message = PhaseBooting, ready.Message
	}
	return st.phase, st.message
}

// unborn says which input this Proxy composes is not Ready yet: "its SeedVolume to be
// created" while it is not observed, "SeedVolume web-seed to be Ready" after; "" when all are.
func unborn(observed map[resource.Name]resource.ObservedComposed, composesImage bool, k genKeys) string {
	inputs := []resource.Name{k.Seed}
	if composesImage {
		inputs = append(inputs, k.BaseImage)
	}
	kinds := map[resource.Name]string{k.Seed: "SeedVolume", k.BaseImage: "BaseImage"}
	for _, in := range inputs {
		o, ok := observed[in]
		if !ok {
			return "its " + kinds[in] + " to be created"
		}
		if cond(conditionsOf(o), "Ready").Status != "True" {
			return kinds[in] + " " + o.Resource.GetName() + " to be Ready"
		}
	}
	return ""
}

// ipv4 is s when it is an IPv4 address, else "".
func ipv4(s string) string {
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
		return a.String()
	}
	return ""
}

// observedSecretIP returns the guest address in an observed Secret, or "" when it has none.
// Secrets written before the Service existed hold it under host only.
func observedSecretIP(s *composed.Unstructured) string {
	var data map[string][]byte // base64 in JSON, decoded by encoding/json
	if err := s.GetValueInto("data", &data); err != nil {
		return ""
	}
	for _, k := range []string{SecretKeyIP, SecretKeyHost} {
		if a, err := netip.ParseAddr(string(data[k])); err == nil && a.Is4() {
			return a.String()
		}
	}
	return ""
}
