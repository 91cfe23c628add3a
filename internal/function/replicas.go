package function

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/resource"
	"github.com/crossplane/function-sdk-go/resource/composite"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/placement"
)

// A Proxy runs spec.replicas VMs, its replicas, numbered from 0. Replica 0 is the Proxy as it
// was before replicas: its resources keep their names (the legacy generation's, or
// domain-<id>/seed-<id>), and the Secret's ip names its address. Replica r above 0 has
// resources domain-r<r>-<id> and seed-r<r>-<id>, named <xr>-r<r>-<id> and <xr>-r<r>-<id>-seed,
// always with a generation id. Each replica is placed on its own, apart from the others when
// placement can (the platform's anti-affinity, placement.PlaceApart), and once placed stays.
// Each has its own generations and roll-out (planRollout); only one replica rolls at a time,
// so the EndpointSlice never lists fewer Ready VMs than before the change. Every Ready
// replica is in the EndpointSlice. Scaling down removes the highest replicas, each once the
// EndpointSlice is seen without it.

// replicaInfix is what a replica's resource names carry after their kind: "" for replica 0,
// "r<r>-" above.
func replicaInfix(r int) string {
	if r == 0 {
		return ""
	}
	return "r" + strconv.Itoa(r) + "-"
}

// keysForReplica are the resource names of generation id of replica r (not legacy).
func keysForReplica(r int, id string) genKeys {
	if r == 0 {
		return keysFor(id, false)
	}
	return genKeys{
		Domain:    resource.Name(ResourceDomain + "-" + replicaInfix(r) + id),
		Seed:      resource.Name(ResourceSeed + "-" + replicaInfix(r) + id),
		BaseImage: resource.Name(ResourceBaseImage + "-" + id),
	}
}

// namesOf are the metadata.names of generation g's resources (its BaseImage's is set by
// whoever composes it).
func namesOf(n Names, base string, g *generation) Names {
	if g.replica == 0 {
		return genNames(n, base, g.id, g.legacy)
	}
	m := n
	m.Domain = childName(base, "-"+replicaInfix(g.replica)+g.id)
	m.Seed = childName(base, "-"+replicaInfix(g.replica)+g.id+"-seed")
	return m
}

// statusGen is an entry of the XR's status.generations as written before.
type statusGen struct {
	ID      string `json:"id"`
	Replica int    `json:"replica,omitempty"`
	Host    string `json:"host,omitempty"`
	Serving bool   `json:"serving,omitempty"`
}

// readStatusGenerations reads the XR's status.generations; nothing when it has none.
func readStatusGenerations(xr *composite.Unstructured) []statusGen {
	var out []statusGen
	if err := xr.GetValueInto("status.generations", &out); err != nil {
		return nil
	}
	return out
}

// replicaAt is where replica r is, or why it is not placed.
type replicaAt struct {
	host   string
	reason string // ReasonNoHostFits or ReasonChoosing when host is ""; ReasonEvacuationBlocked
	why    string
	// left is the host the replica leaves (placed anew: it evacuates, or has not been Ready
	// for longer than the platform's failoverAfter); blocked, when no other
	// host fits, says why it stays there.
	left, blocked string
}

// antiAffinity is the platform's anti-affinity mode, Preferred by default.
func antiAffinity(pol ppv1.ProxyPolicy) placement.AntiAffinity {
	if pol.Placement != nil && pol.Placement.AntiAffinity == ppv1.AntiAffinityStrict {
		return placement.Strict
	}
	return placement.Preferred
}

// observedReplica is true when a KVMDomain of replica r is observed.
func observedReplica(observed map[resource.Name]resource.ObservedComposed, r int) bool {
	for k := range observed {
		if r == 0 && k == ResourceDomain {
			return true
		}
		if id, ok := strings.CutPrefix(string(k), ResourceDomain+"-"+replicaInfix(r)); ok && len(id) == genIDLen {
			return true
		}
	}
	return false
}

// placeReplicas decides the hosts of replicas 1 to p.Replicas-1 (replica 0's is first): the
// host its composed resources name, else the one status.generations recorded, else one
// placement chooses apart from the others' hosts. spec.host names replica 0's host only; the
// others are placed among the hosts the platform (and the shared BaseImage) allow. w is the
// requirement of the hosts to ask for: while placement needs them, and always for a Proxy of
// several replicas (nil for one replica placed).
func placeReplicas(req *fnv1.RunFunctionRequest, xr *composite.Unstructured, spec ProxySpec, p Proxy, ns string, pol ppv1.ProxyPolicy,
	observed map[resource.Name]resource.ObservedComposed, first string, view hostView) ([]replicaAt, *where, error) {
	at, need := placedReplicas(xr, observed, int(p.Replicas), first, view)
	if len(need) == 0 {
		w, err := hostsToWatch(spec, p, pol)
		return at, w, err
	}
	mode := antiAffinity(pol)
	hosts, w, err := candidates(req, spec, p, ns, pol)
	if err != nil {
		return nil, nil, err
	}
	if w.reason == ReasonChoosing {
		for _, r := range need {
			// A replica leaving an evacuating host stays there meanwhile.
			at[r].host, at[r].reason, at[r].why = at[r].left, ReasonChoosing, msgChoosing
		}
		return at, &w, nil
	}
	size := placement.Size{VCPUs: int64(p.VCPU), MemoryBytes: int64(p.MemoryMiB) << 20}
	taken := map[string]int{}
	use := func(host string) {
		for i := range hosts {
			if hosts[i].Name == host {
				hosts[i].Used.VCPUs += size.VCPUs
				hosts[i].Used.MemoryBytes += size.MemoryBytes
			}
		}
	}
	for r, a := range at {
		if a.host == "" {
			continue
		}
		taken[a.host]++
		if !observedReplica(observed, r) {
			use(a.host) // placed, not on the host yet: the host's figures do not hold it
		}
	}
	for _, r := range need {
		d := placement.PlaceApart(hosts, size, taken, mode)
		if d.Host == "" {
			at[r].reason, at[r].why = ReasonNoHostFits, d.Why()
			if mode == placement.Strict {
				at[r].why += " (the platform's anti-affinity is Strict: replicas never share a host)"
			}
			if at[r].left != "" {
				// Nowhere to go: it stays, serving, and says why.
				at[r].host, at[r].reason = at[r].left, ReasonEvacuationBlocked
				at[r].blocked = evacuationBlocked(view, at[r].left, at[r].why)
			}
			continue
		}
		at[r].host = d.Host
		taken[d.Host]++
		use(d.Host)
	}
	return at, &w, nil
}

// hostsToWatch is the hosts requirement of a Proxy whose replicas are all placed: none for one
// replica; for several, the hosts are still asked for, to tell which are not Ready (hosts.go: a
// replica there leaves the Service while another serves), also for a Proxy whose spec.host
// needs no placement of replica 0.
func hostsToWatch(spec ProxySpec, p Proxy, pol ppv1.ProxyPolicy) (*where, error) {
	if p.Replicas < 2 {
		return nil, nil
	}
	sel, err := selector(spec.HostSelector, pol)
	if err != nil {
		return nil, err
	}
	return &where{selector: sel}, nil
}

// placedReplicas are the n replicas' hosts as placed before (replica 0's is first): of each
// replica's composed resources' hosts, then the one status.generations recorded, the first
// it does not leave (view; hosts not known: the first is kept); need are the replicas without
// one (left names the host left of those that had one).
func placedReplicas(xr *composite.Unstructured, observed map[resource.Name]resource.ObservedComposed, n int, first string, view hostView) ([]replicaAt, []int) {
	at := make([]replicaAt, n)
	at[0].host = first
	recorded := map[int]string{}
	for _, s := range readStatusGenerations(xr) {
		if s.Replica > 0 && s.Host != "" {
			recorded[s.Replica] = s.Host
		}
	}
	var need []int
	for r := 1; r < n; r++ {
		hosts := composedHosts(observed, r)
		if recorded[r] != "" {
			hosts = append(hosts, recorded[r])
		}
		if at[r].host, at[r].left = stay(hosts, view); at[r].host == "" {
			need = append(need, r)
		}
	}
	return at, need
}

// placedMessage is the Placed condition of a Proxy whose replica 0 is placed (msg says
// where): its status, reason and message once every replica is considered.
func placedMessage(at []replicaAt, msg string) (bool, string, string) {
	var unplaced, blocked []string
	reason := ReasonPlaced
	for r, a := range at {
		switch {
		case a.host == "":
			unplaced = append(unplaced, fmt.Sprintf("replica %d: %s", r, a.why))
		case a.blocked != "":
			blocked = append(blocked, fmt.Sprintf("replica %d: %s", r, a.blocked))
		default:
			continue
		}
		if reason != ReasonNoHostFits {
			reason = a.reason
		}
	}
	switch {
	case len(unplaced) > 0:
		return false, reason, fmt.Sprintf("%d of %d replicas placed; %s", len(at)-len(unplaced), len(at), strings.Join(append(unplaced, blocked...), "; "))
	case len(blocked) > 0 && len(at) == 1:
		return false, reason, at[0].blocked
	case len(blocked) > 0:
		return false, reason, fmt.Sprintf("%d of %d replicas stay on a host they leave; %s", len(blocked), len(at), strings.Join(blocked, "; "))
	}
	if len(at) > 1 {
		hosts := make([]string, len(at))
		for r, a := range at {
			hosts[r] = a.host
		}
		msg += fmt.Sprintf("; its %d replicas are on %s", len(at), strings.Join(hosts, ", "))
	}
	return true, "", msg
}

// servingReplica is the generation of replica r (above 0) that serves: the one
// status.generations says, when observed; else the first whose address the observed
// EndpointSlice lists; else none.
func servingReplica(gens map[string]*generation, recorded []statusGen, r int, seen cutOver) *generation {
	for _, s := range recorded {
		if s.Replica == r && s.Serving {
			if g, ok := gens[s.ID]; ok {
				return g
			}
		}
	}
	for _, id := range sortedIDs(gens) {
		if g := gens[id]; g.ip != "" && seen.endpointIPs[g.ip] {
			return g
		}
	}
	return nil
}

// replicaPlan is a replica's roll-out plan.
type replicaPlan struct {
	r    int
	want *generation
	pl   plan
	left string // the host the replica leaves (replicaAt.left)
}

// movingFrom is the host g, the generation this replica brings up, moves it off ("" when g is
// not such a generation): its KVMDomain carries LabelMovingFrom while it comes up.
func (rp *replicaPlan) movingFrom(g *generation) string {
	if rp.left == "" || g != rp.pl.to || rp.pl.from == nil || rp.pl.from.def.Host != rp.left {
		return ""
	}
	return rp.left
}

// servingOf is the generation that serves replica rp until a replacement is done.
func (rp *replicaPlan) servingOf() *generation {
	if rp.pl.from != nil {
		return rp.pl.from
	}
	return rp.pl.compose[0]
}

// oneAtATime lets one replica roll at a time: the first whose new generation is composed
// already, else the first that has a change. The others keep their serving generation and
// follow once it is done. While the spec's change failed on a replica (failed names its
// generation), none rolls: the change is not tried on another replica either.
func oneAtATime(plans []*replicaPlan, failed *failure) {
	blocked := false
	for _, rp := range plans {
		if failed != nil && rp.r == failed.Replica && rp.want.id == failed.ID {
			blocked = true
		}
	}
	rolling := -1
	for i, rp := range plans {
		if rp.pl.to != nil && rp.want.exists {
			rolling = i
			break
		}
	}
	if rolling < 0 {
		for i, rp := range plans {
			if rp.pl.to != nil {
				rolling = i
				break
			}
		}
	}
	for i, rp := range plans {
		if rp.pl.to == nil || (i == rolling && !blocked) {
			continue
		}
		from := rp.pl.from
		rp.pl = plan{compose: []*generation{from}, endpoints: from, secret: from}
	}
}

// leaving are the generations of the replicas at or above n (scaled down) that the observed
// EndpointSlice still lists: they stay composed, out of the EndpointSlice, until it is seen
// without them; the others leave the desired state, and Crossplane deletes them.
func leaving(observed map[resource.Name]resource.ObservedComposed, n int, composesImage bool, seen cutOver) []*generation {
	replicas := map[int]bool{}
	for k := range observed {
		for _, kind := range []string{ResourceDomain, ResourceSeed} {
			rest, ok := strings.CutPrefix(string(k), kind+"-r")
			if !ok {
				continue
			}
			num, _, _ := strings.Cut(rest, "-")
			if r, err := strconv.Atoi(num); err == nil && r >= n && r > 0 {
				replicas[r] = true
			}
		}
	}
	rs := make([]int, 0, len(replicas))
	for r := range replicas {
		rs = append(rs, r)
	}
	sort.Ints(rs)
	var out []*generation
	for _, r := range rs {
		gens := observedGenerations(observed, r, composesImage, Def{}, "")
		for _, id := range sortedIDs(gens) {
			g := gens[id]
			if _, known := readDef(observed, g.keys); known && g.ip != "" && seen.endpointIPs[g.ip] {
				out = append(out, g)
			}
		}
	}
	return out
}
