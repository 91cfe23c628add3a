package placement

import "sort"

// AntiAffinity says how replicas of one Proxy spread over hosts.
type AntiAffinity string

// Anti-affinity modes.
const (
	// Strict: a replica never goes to a host that holds another replica of the same Proxy;
	// without such a host it is not placed.
	Strict AntiAffinity = "Strict"
	// Preferred: a replica goes to a host without another replica when one fits, else to a
	// fitting host with the fewest replicas.
	Preferred AntiAffinity = "Preferred"
)

// PlaceApart places one more replica of a Proxy that has taken[host] replicas on each host
// already, by Place's rules (the most memory left once placed) among the hosts that hold
// none; in Preferred mode, when none of those fits, among the fitting hosts holding the
// fewest. Skipped lists each host and why, as Place does.
func PlaceApart(hosts []Host, want Size, taken map[string]int, mode AntiAffinity) Decision {
	apart := make([]Host, len(hosts))
	for i, h := range hosts {
		apart[i] = h
		if taken[h.Name] > 0 && apart[i].Excluded == "" {
			apart[i].Excluded = "holds a replica of this Proxy already (anti-affinity)"
		}
	}
	d := Place(apart, want)
	if d.Host != "" || mode != Preferred {
		return d
	}
	// Preferred: the hosts that hold replicas, fewest first; the first count that fits wins.
	counts := map[int]bool{}
	for _, h := range hosts {
		if n := taken[h.Name]; n > 0 {
			counts[n] = true
		}
	}
	ns := make([]int, 0, len(counts))
	for n := range counts {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	for _, n := range ns {
		some := make([]Host, 0, len(hosts))
		for _, h := range hosts {
			if taken[h.Name] == n {
				some = append(some, h)
			}
		}
		if shared := Place(some, want); shared.Host != "" {
			shared.Skipped = d.Skipped
			return shared
		}
	}
	return d
}
