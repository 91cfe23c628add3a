package function

import (
	"fmt"
	"strings"
	"time"
)

// PhaseUpdating is the phase of a Proxy while a new generation replaces the serving one.
const PhaseUpdating = "Updating"

// The UpToDate condition of a Proxy, and its reasons.
const (
	ConditionUpToDate       = "UpToDate"
	ReasonCurrent           = "Current"           // the serving generation is the spec's
	ReasonReplacing         = "Replacing"         // a new generation is being brought up
	ReasonReplacementFailed = "ReplacementFailed" // the new generation was not Ready in time
)

// failure is a generation that was not Ready within the bound, remembered in the XR's
// status.failedGeneration so that it is not tried again until the spec changes.
type failure struct {
	ID      string `json:"id"`
	Message string `json:"message"`
	Replica int    `json:"replica,omitempty"` // the replica whose generation failed
}

// cutOver is what the EndpointSlice and the Secret name as seen in the observed state.
type cutOver struct {
	endpointIPs map[string]bool // addresses the observed EndpointSlice lists
	secretIP    string          // the address the observed Secret names
	secretPort  int32
	// noSecret: the replica this cut-over is planned for is not the one the Secret names
	// (replicas.go), so its cut-over ends once the EndpointSlice lists the new generation.
	noSecret bool
}

// plan is the outcome of a rollout decision.
type plan struct {
	compose   []*generation // kept in the desired state; the others are deleted by Crossplane
	endpoints *generation   // the generation the EndpointSlice lists
	secret    *generation   // the generation the Secret (and status url, ip, host) names
	from, to  *generation   // set while to replaces from
	changed   []string      // the fields that forced the replacement
	failed    *failure      // the failure to keep in status
	failedNow bool          // failed during this call: say so with a warning too
}

// planRollout decides which generations are composed and which one serves, from the
// generation the spec wants, the one serving (nil: none yet), and the observed cut-over. A
// new generation is composed beside the serving one; once it is Ready the EndpointSlice
// switches to it, once the EndpointSlice is observed on it the Secret does, and once the
// Secret is observed on it the old generation drops out. A new generation not Ready within
// bound of its KVMDomain's creation is dropped and remembered as failed.
func planRollout(want, serving *generation, failed *failure, seen cutOver, now time.Time, bound time.Duration) plan { //nolint:gocyclo // one ordered list of the roll-out's stages
	single := func(g *generation) plan { return plan{compose: []*generation{g}, endpoints: g, secret: g} }
	if serving == nil || serving.id == want.id {
		return single(want)
	}
	if !serving.ready && serving.ip == "" && seen.secretIP == "" {
		// The serving generation never had an address, so it serves nobody (a Proxy that never
		// came up, edited to fix it): replaced at once, without holding room beside the new one.
		return single(want)
	}
	changed := ChangedFields(serving.def, want.def)
	if failed != nil && failed.ID == want.id {
		p := single(serving)
		p.failed = failed
		return p
	}
	if want.exists && !want.ready && !want.created.IsZero() && now.Sub(want.created) > bound {
		p := single(serving)
		msg := want.message
		if msg == "" {
			msg = "phase " + want.phase
		}
		p.failed = &failure{ID: want.id, Message: fmt.Sprintf("generation %s (changed: %s) was not Ready within %s: %s; generation %s keeps serving; change the spec to try again",
			want.id, strings.Join(changed, ", "), bound, msg, serving.id)}
		p.failedNow = true
		return p
	}
	epOnNew := want.ip != "" && seen.endpointIPs[want.ip]
	secretOnNew := want.ip != "" && (seen.noSecret || seen.secretIP == want.ip && seen.secretPort == want.def.Port)
	switch {
	case epOnNew && secretOnNew:
		return single(want) // the old generation drops out
	case epOnNew:
		return plan{compose: []*generation{serving, want}, endpoints: want, secret: want, from: serving, to: want, changed: changed}
	case want.ready:
		return plan{compose: []*generation{serving, want}, endpoints: want, secret: serving, from: serving, to: want, changed: changed}
	default:
		return plan{compose: []*generation{serving, want}, endpoints: serving, secret: serving, from: serving, to: want, changed: changed}
	}
}

// servingGeneration is the generation that serves now: the one status.generation names when
// it is observed; else the legacy one; else the one whose address the observed Secret names.
func servingGeneration(gens map[string]*generation, statusID string, seen cutOver) *generation {
	if g, ok := gens[statusID]; ok && statusID != "" {
		return g
	}
	for _, id := range sortedIDs(gens) {
		if gens[id].legacy {
			return gens[id]
		}
	}
	for _, id := range sortedIDs(gens) {
		if g := gens[id]; g.ip != "" && g.ip == seen.secretIP {
			return g
		}
	}
	return nil
}
