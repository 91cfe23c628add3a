package function

import (
	"fmt"
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
	p        Proxy // placed: replica 0's host
	at       []replicaAt
	hosts    hostView
	n        Names
	ns       string
	base     string // the name the composed names derive from
	userData string
	observed map[resource.Name]resource.ObservedComposed
	desired  map[resource.Name]*resource.DesiredComposed
}

// planReplicas plans the roll-out of every placed replica, one rolling at a time.
func (f *Function) planReplicas(in rollIn, seen cutOver) ([]*replicaPlan, *failure) {
	composesImage := in.p.BaseImageName == ""
	statusID, _ := in.xr.GetString(statusGeneration)
	recorded := readStatusGenerations(in.xr)
	var failed *failure
	if err := in.xr.GetValueInto(statusFailedGeneration, &failed); err != nil {
		failed = nil
	}
	bound := in.pol.Replacement.ReadyWithinOr(defaultReadyWithin).Duration
	plans := make([]*replicaPlan, 0, len(in.at))
	for r, a := range in.at {
		if a.host == "" {
			continue
		}
		p := in.p
		p.Host = a.host
		wantDef := DefOf(p, in.userData)
		wantID := GenerationID(wantDef)
		gens := observedGenerations(in.observed, r, composesImage, wantDef, wantID)
		doubt(gens, in.hosts)
		want, ok := gens[wantID]
		switch {
		case ok:
		case r == 0 && len(gens) == 0:
			// A Proxy's first generation takes the names without an id (<xr>, <xr>-seed), as
			// Proxies had before generations: its names are predictable, and later ones carry ids.
			want = &generation{id: wantID, legacy: true, keys: keysFor(wantID, true), def: wantDef, phase: PhaseCreating}
		default:
			want = &generation{id: wantID, replica: r, keys: keysForReplica(r, wantID), def: wantDef, phase: PhaseCreating}
		}
		rs := seen
		var serving *generation
		if r == 0 {
			serving = servingGeneration(gens, statusID, seen)
		} else {
			rs = cutOver{endpointIPs: seen.endpointIPs, noSecret: true}
			serving = servingReplica(gens, recorded, r, rs)
		}
		var fr *failure
		if failed != nil && failed.Replica == r {
			fr = failed
		}
		pl := planRollout(want, serving, fr, rs, f.now(), bound)
		if pl.failed != nil {
			pl.failed.Replica = r
		}
		plans = append(plans, &replicaPlan{r: r, want: want, pl: pl, left: a.left})
	}
	oneAtATime(plans, failed)
	var keep *failure
	for _, rp := range plans {
		if rp.pl.failed != nil && keep == nil {
			keep = rp.pl.failed
		}
	}
	return plans, keep
}

// doubt takes back the readiness of the generations whose host is not Ready: their
// KVMDomain's Ready condition is the last the provider could read.
func doubt(gens map[string]*generation, hosts hostView) {
	for _, g := range gens {
		why := hosts.down[g.def.Host]
		if why == "" || !g.ready {
			continue
		}
		g.ready, g.unconfirmed = false, true
		g.phase, g.message = PhaseHostNotReady, why+"; its VM was Ready when last seen"
	}
}

// backend is a replica's generation as the EndpointSlice lists it.
type backend struct {
	ip    string
	ready bool
	// unconfirmed: Ready when its host was last read, which is not Ready now (doubt).
	unconfirmed bool
	port        int32
}

// composeGenerations composes the generations the roll-outs of the replicas keep, the
// Service, EndpointSlice and Secret, and writes the XR's status.
func (f *Function) composeGenerations(in rollIn, rsp *fnv1.RunFunctionResponse) error { //nolint:gocyclo // one pass: plan, build every object, then write; each step only returns its error
	composesImage := in.p.BaseImageName == ""
	seen := observedCutOver(in.observed)
	plans, failed := f.planReplicas(in, seen)
	first := plans[0] // replica 0 is always placed
	pl := first.pl

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
	readyBesides := func(r int) bool {
		for _, rp := range plans {
			if rp.r != r && rp.pl.endpoints.ready {
				return true
			}
		}
		return false
	}
	// The BaseImages composed in this call, by host, url and sha256: a replica placed beside
	// another on its host, before either image is observed, shares it.
	images := map[string][2]string{}
	composeGen := func(g *generation, ready bool, movingFrom string) error {
		gp := g.def.Proxy()
		gn := namesOf(in.n, in.base, g)
		if gp.BaseImageName == "" {
			key, name := g.keys.BaseImage, in.n.BaseImage
			if !g.legacy {
				key, name = imageOf(in.observed, in.base, g)
			}
			at := gp.Host + " " + gp.ImageURL + " " + gp.ImageSHA256
			if prev, ok := images[at]; ok {
				if _, observed := in.observed[key]; !observed {
					key, name = resource.Name(prev[0]), prev[1]
				}
			}
			images[at] = [2]string{string(key), name}
			gn.BaseImage = name
			if err := put(key, labelled(BaseImage(gp, gn, in.ns), g), ready); err != nil {
				return err
			}
		}
		if err := put(g.keys.Seed, labelled(SeedVolume(gp, gn, in.ns, in.n.Domain, g.def.UserData), g), ready); err != nil {
			return err
		}
		d := labelled(KVMDomain(gp, gn, in.ns), g)
		if movingFrom != "" {
			l := d.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			l[LabelMovingFrom] = movingFrom
			d.SetLabels(l)
		}
		return put(g.keys.Domain, d, ready)
	}
	for _, rp := range plans {
		for _, g := range rp.pl.compose {
			// A new generation's resources do not hold the Proxy's readiness: the serving one's
			// do; nor do those of replica 0 while another replica serves, nor any other replica's.
			if err := composeGen(g, g == rp.pl.to || rp.r > 0 || readyBesides(rp.r), rp.movingFrom(g)); err != nil {
				return err
			}
		}
	}
	for _, g := range leaving(in.observed, len(in.at), composesImage, seen) {
		if err := composeGen(g, true, ""); err != nil {
			return err
		}
	}

	ep, sec := pl.endpoints, pl.secret
	port := ep.def.Port
	var prevPort int32
	if pl.from != nil && ep == pl.to {
		prevPort = pl.from.def.Port
	}
	var backends []backend
	for _, rp := range plans {
		e := rp.pl.endpoints
		ip := e.ip
		if ip == "" && rp.r == 0 && e == sec {
			ip = seen.secretIP // the last address known, kept while the guest reports none (a reboot)
		}
		if ip != "" {
			backends = append(backends, backend{ip: ip, ready: e.ready, unconfirmed: e.unconfirmed, port: e.def.Port})
		}
	}
	// Once one backend is Ready only the Ready ones are listed; a single replica's is listed
	// with its readiness as before. A backend whose host is not Ready (unconfirmed) is left out
	// while another is Ready; while none is, it is listed as Ready: it may well still answer,
	// and leaving it out would make sure nothing does.
	anyReady := false
	for _, b := range backends {
		anyReady = anyReady || b.ready
	}
	if !anyReady {
		for i := range backends {
			backends[i].ready = backends[i].ready || backends[i].unconfirmed
		}
	}
	main := map[int32][]Backend{}
	listed := map[string]bool{}
	readyReplicas := 0
	for _, b := range backends {
		if (anyReady && !b.ready) || listed[b.ip] {
			continue
		}
		if b.port != port && prevPort == 0 {
			prevPort = b.port // a port change rolls over the replicas: the others keep the old port
		}
		if b.port != port && b.port != prevPort {
			continue // a third port (an edit during a port change's roll-out) waits its turn
		}
		listed[b.ip] = true
		main[b.port] = append(main[b.port], Backend{IP: b.ip, Ready: b.ready})
		if b.ready && !b.unconfirmed {
			readyReplicas++
		}
	}
	if err := put(ResourceService, Service(in.n, in.ns, port, prevPort), false); err != nil {
		return err
	}
	if len(main[port]) > 0 {
		if err := put(ResourceEndpoints, EndpointSlice(in.n, in.ns, main[port], port, prevPort), false); err != nil {
			return err
		}
	}
	if prevPort != 0 && prevPort != port && len(main[prevPort]) > 0 {
		// The replicas still on the old port: a second EndpointSlice of the Service, whose
		// ports reach them at the old port under both of the Service's port names.
		if err := put(ResourceEndpointsPrev, EndpointSliceNamed(childName(in.n.Service, "-prev"), in.n, in.ns, main[prevPort], prevPort, port), false); err != nil {
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
	for _, name := range []resource.Name{ResourceSecret, ResourceService, ResourceEndpoints, ResourceEndpointsPrev} {
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

	// ProxyReady follows the generation that serves: a Proxy being updated still answers; so
	// does one whose replica 0 is down while another replica serves.
	phase, message := sec.phase, sec.message
	if phase != PhaseReady && readyReplicas > 0 {
		phase, message = PhaseReady, ""
	}
	if len(in.at) > 1 && readyReplicas < len(in.at) {
		message = replicasMessage(plans, in.at, readyReplicas, message)
	}
	proxyReady(rsp, phase, message)
	status := map[string]any{"phase": phase, "message": message, "secretName": in.n.Secret, "host": sec.def.Host,
		"generation": first.servingOf().id, "replicas": int64(len(plans)), "readyReplicas": int64(readyReplicas)}
	var shown []any
	var rolling *replicaPlan
	for _, rp := range plans {
		if rp.pl.to != nil {
			rolling = rp
		}
		for _, g := range rp.pl.compose {
			serving := g == sec
			if rp.r > 0 {
				serving = g == rp.servingOf()
			}
			s := map[string]any{"id": g.id, "host": g.def.Host, "ready": g.ready, "serving": serving}
			if g.ip != "" {
				s["ip"] = g.ip
			}
			if rp.r > 0 {
				s["replica"] = int64(rp.r)
			}
			shown = append(shown, s)
		}
	}
	status["generations"] = shown
	switch {
	case rolling != nil:
		rpl := rolling.pl
		status["phase"] = PhaseUpdating
		msg := "generation " + rpl.to.id + " replaces " + rpl.from.id + " (changed: " + strings.Join(rpl.changed, ", ") + "): "
		if rolling.r > 0 {
			msg = fmt.Sprintf("replica %d: %s", rolling.r, msg)
		}
		switch {
		case rolling.r == 0 && sec == rpl.to:
			msg += "it serves; the old generation is removed next"
		case rpl.endpoints == rpl.to && rolling.r == 0:
			msg += "it is Ready and in the Service; the Secret follows"
		case rpl.endpoints == rpl.to:
			msg += "it is Ready and in the Service; the old generation is removed next"
		default:
			msg += strings.ToLower(rpl.to.phase)
			if rpl.to.message != "" {
				msg += ": " + rpl.to.message
			}
		}
		status["message"] = msg
		cmsg := "spec changed (" + strings.Join(rpl.changed, ", ") + "): generation " + rpl.to.id + " replaces " + rpl.from.id + " once Ready"
		if len(in.at) > 1 {
			cmsg += fmt.Sprintf(" (replica %d; the replicas are replaced one at a time)", rolling.r)
		}
		response.ConditionFalse(rsp, ConditionUpToDate, ReasonReplacing).WithMessage(cmsg).TargetCompositeAndClaim()
	case failed != nil:
		fs := map[string]any{"id": failed.ID, "message": failed.Message}
		if failed.Replica > 0 {
			fs["replica"] = int64(failed.Replica)
		}
		status["failedGeneration"] = fs
		response.ConditionFalse(rsp, ConditionUpToDate, ReasonReplacementFailed).WithMessage(failed.Message).TargetCompositeAndClaim()
		for _, rp := range plans {
			if rp.pl.failedNow {
				response.Warning(rsp, errors.New(failed.Message)).WithReason(ReasonReplacementFailed).TargetCompositeAndClaim()
			}
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

// replicasMessage says how many replicas of a Proxy with several are Ready, and why the first
// one that is not is not.
func replicasMessage(plans []*replicaPlan, at []replicaAt, ready int, message string) string {
	msg := fmt.Sprintf("%d of %d replicas Ready", ready, len(at))
	for _, rp := range plans {
		if e := rp.pl.endpoints; !e.ready {
			why := strings.ToLower(e.phase)
			switch {
			case e.unconfirmed:
				why = e.message // it says its host is not Ready
			case e.message != "":
				why += ": " + e.message
			}
			msg += fmt.Sprintf("; replica %d: %s", rp.r, why)
			break
		}
	}
	for r, a := range at {
		if a.host == "" {
			msg += fmt.Sprintf("; replica %d is not placed (see the Placed condition)", r)
			break
		}
	}
	if message != "" && ready == 0 {
		return message + " (" + msg + ")"
	}
	return msg
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
	return imageFor(observed, base, g.def, g.replica)
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
	for _, name := range []resource.Name{ResourceEndpoints, ResourceEndpointsPrev} {
		eps, ok := observed[name]
		if !ok {
			continue
		}
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
