package function

import (
	"strings"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
	"github.com/crossplane/function-sdk-go/resource/composite"
	"github.com/crossplane/function-sdk-go/response"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
)

// defaultReadyWithin is ppv1.DefaultReadyWithin.
var defaultReadyWithin = metav1.Duration{Duration: 15 * time.Minute}

// Fields of the XR's status the rollout keeps.
const (
	statusGeneration       = "status.generation"
	statusFailedGeneration = "status.failedGeneration"
)

// rollIn is what composeGenerations works from: the placed, validated Proxy and the request.
type rollIn struct {
	xr       *composite.Unstructured
	dxr      *resource.Composite
	pol      ppv1.ProxyPolicy
	p        Proxy // placed
	n        Names
	ns       string
	base     string // the name the composed names derive from
	userData string
	observed map[resource.Name]resource.ObservedComposed
	desired  map[resource.Name]*resource.DesiredComposed
}

// composeGenerations composes the generations the rollout keeps, the Service, EndpointSlice
// and Secret of the one that serves, and writes the XR's status.
func (f *Function) composeGenerations(in rollIn, rsp *fnv1.RunFunctionResponse) error { //nolint:gocyclo // one pass: plan, build every object, then write; each step only returns its error
	composesImage := in.p.BaseImageName == ""
	wantDef := DefOf(in.p, in.userData)
	wantID := GenerationID(wantDef)
	gens := observedGenerations(in.observed, composesImage, wantDef, wantID)
	want, ok := gens[wantID]
	switch {
	case ok:
	case len(gens) == 0:
		// A Proxy's first generation takes the names without an id (<xr>, <xr>-seed), as
		// Proxies had before generations: its names are predictable, and later ones carry ids.
		want = &generation{id: wantID, legacy: true, keys: keysFor(wantID, true), def: wantDef, phase: PhaseCreating}
	default:
		want = &generation{id: wantID, keys: keysFor(wantID, false), def: wantDef, phase: PhaseCreating}
	}
	seen := observedCutOver(in.observed)
	statusID, _ := in.xr.GetString(statusGeneration)
	var failed *failure
	if err := in.xr.GetValueInto(statusFailedGeneration, &failed); err != nil {
		failed = nil
	}
	bound := in.pol.Replacement.ReadyWithinOr(defaultReadyWithin).Duration
	pl := planRollout(want, servingGeneration(gens, statusID, seen), failed, seen, f.now(), bound)

	// Build everything before touching the response, so a failure composes nothing.
	add := map[resource.Name]*resource.DesiredComposed{}
	put := func(name resource.Name, o runtime.Object, ready bool) error {
		u, err := toComposed(o)
		if err != nil {
			return err
		}
		d := &resource.DesiredComposed{Resource: u}
		if ready {
			d.Ready = resource.ReadyTrue
		}
		add[name] = d
		return nil
	}
	for _, g := range pl.compose {
		gp := g.def.Proxy()
		gn := genNames(in.n, in.base, g.id, g.legacy)
		// A new generation's resources do not hold the Proxy's readiness: the serving one's do.
		ready := g == pl.to
		if gp.BaseImageName == "" {
			key, name := g.keys.BaseImage, in.n.BaseImage
			if !g.legacy {
				key, name = imageOf(in.observed, in.base, g)
			}
			gn.BaseImage = name
			if err := put(key, labelled(BaseImage(gp, gn, in.ns), g), ready); err != nil {
				return err
			}
		}
		if err := put(g.keys.Seed, labelled(SeedVolume(gp, gn, in.ns, in.n.Domain, g.def.UserData), g), ready); err != nil {
			return err
		}
		if err := put(g.keys.Domain, labelled(KVMDomain(gp, gn, in.ns), g), ready); err != nil {
			return err
		}
	}

	ep, sec := pl.endpoints, pl.secret
	var prevPort int32
	if pl.from != nil && ep == pl.to {
		prevPort = pl.from.def.Port
	}
	if err := put(ResourceService, Service(in.n, in.ns, ep.def.Port, prevPort), false); err != nil {
		return err
	}
	epIP := ep.ip
	if epIP == "" && ep == sec {
		epIP = seen.secretIP // the last address known, kept while the guest reports none (a reboot)
	}
	if epIP != "" {
		if err := put(ResourceEndpoints, EndpointSlice(in.n, in.ns, []Backend{{IP: epIP, Ready: ep.ready}}, ep.def.Port, prevPort), false); err != nil {
			return err
		}
	}
	secIP := sec.ip
	if secIP == "" {
		secIP = seen.secretIP
	}
	var data map[string][]byte
	if secIP != "" {
		data = Endpoint{Service: in.n.Service, Namespace: in.ns, IP: secIP, Port: sec.def.Port}.Data()
		add[ResourceSecret] = &resource.DesiredComposed{Resource: Secret(in.n, in.ns, data)}
	}
	// A Secret, Service or EndpointSlice is ready once it exists. Say so rather than rely on
	// the readiness step knowing them: function-auto-ready waits for a Ready condition,
	// which they never get.
	for _, name := range []resource.Name{ResourceSecret, ResourceService, ResourceEndpoints} {
		if _, exists := in.observed[name]; exists && add[name] != nil {
			add[name].Ready = resource.ReadyTrue
		}
	}
	for name, d := range add {
		in.desired[name] = d
	}
	if err := response.SetDesiredComposedResources(rsp, in.desired); err != nil {
		return errors.Wrap(err, "cannot set the desired composed resources")
	}

	// ProxyReady follows the generation that serves: a Proxy being updated still answers.
	proxyReady(rsp, sec.phase, sec.message)
	status := map[string]any{"phase": sec.phase, "message": sec.message, "secretName": in.n.Secret, "host": sec.def.Host,
		"generation": pl.compose[0].id}
	if pl.from != nil {
		status["generation"] = pl.from.id
	}
	var shown []any
	for _, g := range pl.compose {
		s := map[string]any{"id": g.id, "host": g.def.Host, "ready": g.ready, "serving": g == sec}
		if g.ip != "" {
			s["ip"] = g.ip
		}
		shown = append(shown, s)
	}
	status["generations"] = shown
	switch {
	case pl.to != nil:
		status["phase"] = PhaseUpdating
		msg := "generation " + pl.to.id + " replaces " + pl.from.id + " (changed: " + strings.Join(pl.changed, ", ") + "): "
		switch {
		case sec == pl.to:
			msg += "it serves; the old generation is removed next"
		case ep == pl.to:
			msg += "it is Ready and in the Service; the Secret follows"
		default:
			msg += strings.ToLower(pl.to.phase)
			if pl.to.message != "" {
				msg += ": " + pl.to.message
			}
		}
		status["message"] = msg
		response.ConditionFalse(rsp, ConditionUpToDate, ReasonReplacing).
			WithMessage("spec changed (" + strings.Join(pl.changed, ", ") + "): generation " + pl.to.id + " replaces " + pl.from.id + " once Ready").TargetCompositeAndClaim()
	case pl.failed != nil:
		status["failedGeneration"] = map[string]any{"id": pl.failed.ID, "message": pl.failed.Message}
		response.ConditionFalse(rsp, ConditionUpToDate, ReasonReplacementFailed).WithMessage(pl.failed.Message).TargetCompositeAndClaim()
		if pl.failedNow {
			response.Warning(rsp, errors.New(pl.failed.Message)).WithReason(ReasonReplacementFailed).TargetCompositeAndClaim()
		}
	default:
		response.ConditionTrue(rsp, ConditionUpToDate, ReasonCurrent).WithMessage("generation " + pl.compose[0].id + " is the spec's").TargetCompositeAndClaim()
	}
	if data != nil {
		status["ip"] = secIP
		status["url"] = string(data[SecretKeyURL])
		for k, v := range data {
			in.dxr.ConnectionDetails[k] = v
		}
	}
	for k, v := range status {
		if err := in.dxr.Resource.SetValue("status."+k, v); err != nil {
			return errors.Wrapf(err, "cannot set status.%s", k)
		}
	}
	if err := response.SetDesiredCompositeResource(rsp, in.dxr); err != nil {
		return errors.Wrap(err, "cannot set the desired composite resource")
	}
	return nil
}

// imageOf is the resource name and metadata.name of the BaseImage generation g boots: the one
// its observed KVMDomain names, else the one imageFor chooses.
func imageOf(observed map[resource.Name]resource.ObservedComposed, base string, g *generation) (resource.Name, string) {
	if d, ok := observed[g.keys.Domain]; ok {
		ref, _ := d.Resource.GetString("spec.forProvider.baseImageRef.name")
		if key, _ := composedImage(observed, ref); key != "" {
			return key, ref
		}
	}
	return imageFor(observed, base, g.def)
}

// labelled labels a generation's object with its id (not the legacy generation's: its
// objects stay as they were composed).
func labelled[T interface {
	runtime.Object
	GetLabels() map[string]string
	SetLabels(map[string]string)
}](o T, g *generation) T {
	if g.legacy {
		return o
	}
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[LabelGeneration] = g.id
	o.SetLabels(l)
	return o
}

// observedCutOver reads the addresses the observed EndpointSlice lists and the address and
// port the observed Secret names.
func observedCutOver(observed map[resource.Name]resource.ObservedComposed) cutOver {
	c := cutOver{endpointIPs: map[string]bool{}}
	if eps, ok := observed[ResourceEndpoints]; ok {
		var list []struct {
			Addresses []string `json:"addresses"`
		}
		_ = eps.Resource.GetValueInto("endpoints", &list)
		for _, e := range list {
			for _, a := range e.Addresses {
				c.endpointIPs[a] = true
			}
		}
	}
	if s, ok := observed[ResourceSecret]; ok {
		c.secretIP = observedSecretIP(s.Resource)
		var data map[string][]byte
		if err := s.Resource.GetValueInto("data", &data); err == nil {
			var port int
			for _, ch := range string(data[SecretKeyPort]) {
				if ch < '0' || ch > '9' {
					port = 0
					break
				}
				port = port*10 + int(ch-'0')
			}
			if port > 0 && port <= maxPortNumber {
				c.secretPort = int32(port)
			}
		}
	}
	return c
}
