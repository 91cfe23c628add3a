package libvirt

import (
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// DefinitionMaxAge is how long a remembered domain definition is used without a lifecycle
// event: changes that raise none (a network interface hot-plugged by hand) are seen within it.
const DefinitionMaxAge = 10 * time.Minute

// definitions remembers the definitions of each host's domains between reads of all of them
// (the MAC, count and room checks of every new domain, the in-use scans of deletions), so that
// such a read costs one call and one per domain new or changed since, not one per domain: at a
// thousand domains on a host the checks of each create read a thousand definitions otherwise.
//
// It is trusted for a host only while that host's domain events are watched (EventsWatched, by
// internal/domainevents, until EventsLost): every lifecycle event of a domain (defined,
// undefined, started, stopped, ...) forgets it. Without events every read reads every
// definition, as before.
//
// A read that an event of a domain overtook does not keep that domain's definition, so a
// definition read before a change is never kept after it; the others it read are kept.
type definitions struct {
	mu    sync.Mutex
	hosts map[string]*hostDefinitions
}

type hostDefinitions struct {
	watchers int               // event subscriptions alive on the host
	resets   uint64            // bumped when a subscription comes or goes: reads begun before keep nothing
	epoch    uint64            // bumped by every event
	changed  map[string]uint64 // the epoch of each domain's last event, by name
	byUUID   map[golibvirt.UUID]definition
}

// maxChanged bounds the event epochs a host keeps; past it, everything is forgotten.
const maxChanged = 4096

type definition struct {
	name string
	xml  string
	read time.Time
}

func (d *definitions) host(address string) *hostDefinitions {
	if d.hosts == nil {
		d.hosts = map[string]*hostDefinitions{}
	}
	h := d.hosts[address]
	if h == nil {
		h = &hostDefinitions{byUUID: map[golibvirt.UUID]definition{}, changed: map[string]uint64{}}
		d.hosts[address] = h
	}
	return h
}

// watched records that a subscription to the host's lifecycle events is up.
func (d *definitions) watched(address string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.host(address)
	h.watchers++
	h.resets++
}

// lost records that a subscription ended; with none left, everything of the host is forgotten.
func (d *definitions) lost(address string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.host(address)
	if h.watchers > 0 {
		h.watchers--
	}
	h.resets++
	if h.watchers == 0 {
		clear(h.byUUID)
		clear(h.changed)
	}
}

// changed forgets the definition of the domain named name on the host.
func (d *definitions) changed(address, name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.host(address)
	h.epoch++
	if len(h.changed) >= maxChanged {
		clear(h.changed)
		clear(h.byUUID)
		h.resets++
	}
	h.changed[name] = h.epoch
	for u, def := range h.byUUID {
		if def.name == name {
			delete(h.byUUID, u)
		}
	}
}

// read returns the definition of every domain that list names, fetching those it does not
// remember (fetch returning "" leaves a domain out: it went away meanwhile).
func (d *definitions) read(address string, now time.Time, list func() ([]golibvirt.Domain, error),
	fetch func(golibvirt.Domain) (string, error)) ([]string, error) {
	d.mu.Lock()
	h := d.host(address)
	trusted, resets, epoch := h.watchers > 0, h.resets, h.epoch
	d.mu.Unlock()

	doms, err := list()
	if err != nil {
		return nil, err
	}
	var known map[golibvirt.UUID]definition
	if trusted {
		known = d.remembered(h, doms, now)
	}
	out := make([]string, 0, len(doms))
	fresh := map[golibvirt.UUID]definition{}
	for _, dom := range doms {
		if def, ok := known[dom.UUID]; ok {
			out = append(out, def.xml)
			continue
		}
		x, err := fetch(dom)
		if err != nil {
			return nil, err
		}
		if x == "" {
			continue
		}
		out = append(out, x)
		fresh[dom.UUID] = definition{name: dom.Name, xml: x, read: now}
	}
	if trusted {
		d.store(h, doms, fresh, resets, epoch)
	}
	return out, nil
}

// remembered is what h holds of doms, under the same name and younger than DefinitionMaxAge.
func (d *definitions) remembered(h *hostDefinitions, doms []golibvirt.Domain, now time.Time) map[golibvirt.UUID]definition {
	d.mu.Lock()
	defer d.mu.Unlock()
	known := map[golibvirt.UUID]definition{}
	for _, dom := range doms {
		if def, ok := h.byUUID[dom.UUID]; ok && def.name == dom.Name && now.Sub(def.read) < DefinitionMaxAge {
			known[dom.UUID] = def
		}
	}
	return known
}

// store keeps what a read that began at resets and epoch fetched, but for domains an event
// overtook, and forgets the domains that are gone; nothing when a subscription came or went.
func (d *definitions) store(h *hostDefinitions, doms []golibvirt.Domain, fresh map[golibvirt.UUID]definition, resets, epoch uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h.resets != resets || h.watchers == 0 {
		return
	}
	present := make(map[golibvirt.UUID]bool, len(doms))
	for _, dom := range doms {
		present[dom.UUID] = true
	}
	for u := range h.byUUID {
		if !present[u] {
			delete(h.byUUID, u)
		}
	}
	for u, def := range fresh {
		if h.changed[def.name] <= epoch { // no event of it since the read began
			h.byUUID[u] = def
		}
	}
}

// EventsWatched records that a subscription to the lifecycle events of the host at address is
// up (internal/domainevents calls it): from then on, the host's domain definitions are
// remembered between reads until an event says one changed.
func (s *Shared) EventsWatched(address string) { s.defs.watched(address) }

// EventsLost records that a subscription to the host's events ended.
func (s *Shared) EventsLost(address string) { s.defs.lost(address) }

// DomainChanged records a lifecycle event of the domain named domain on the host.
func (s *Shared) DomainChanged(address, domain string) { s.defs.changed(address, domain) }
