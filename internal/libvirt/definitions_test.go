package libvirt

import (
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/google/go-cmp/cmp"
)

const defsHost = "root@host:22"

func dom(n byte) golibvirt.Domain {
	return golibvirt.Domain{Name: "ns_vm" + string('0'+n), UUID: golibvirt.UUID{n}}
}

// defsHostFake is a host's domains and the definitions fetched from it.
type defsHostFake struct {
	doms    []golibvirt.Domain
	xml     map[string]string
	fetched []string
	during  func(name string) // runs inside each fetch, e.g. an event arriving meanwhile
}

func (h *defsHostFake) read(d *definitions, now time.Time) []string {
	h.fetched = nil
	out, err := d.read(defsHost, now,
		func() ([]golibvirt.Domain, error) { return h.doms, nil },
		func(dm golibvirt.Domain) (string, error) {
			h.fetched = append(h.fetched, dm.Name)
			if h.during != nil {
				h.during(dm.Name)
			}
			return h.xml[dm.Name], nil
		})
	if err != nil {
		panic(err)
	}
	return out
}

func TestDefinitions(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	type step struct {
		before   func(d *definitions, h *defsHostFake)
		at       time.Duration
		wantXML  []string
		wantRead []string // definitions fetched by this read
	}
	cases := map[string]struct {
		watched bool
		steps   []step
	}{
		"NotWatchedReadsEveryTime": {
			steps: []step{
				{wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
			},
		},
		"WatchedRemembers": {
			watched: true,
			steps: []step{
				{wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{wantXML: []string{"a", "b"}},
			},
		},
		"NewDomainReadAlone": {
			watched: true,
			steps: []step{
				{wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{before: func(_ *definitions, h *defsHostFake) { h.doms = append(h.doms, dom(3)); h.xml["ns_vm3"] = "c" },
					wantXML: []string{"a", "b", "c"}, wantRead: []string{"ns_vm3"}},
			},
		},
		"EventForgetsTheDomain": {
			watched: true,
			steps: []step{
				{wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{before: func(d *definitions, h *defsHostFake) { h.xml["ns_vm2"] = "b2"; d.changed(defsHost, "ns_vm2") },
					wantXML: []string{"a", "b2"}, wantRead: []string{"ns_vm2"}},
				{wantXML: []string{"a", "b2"}},
			},
		},
		"EventDuringTheReadKeepsThatOneOut": {
			watched: true,
			steps: []step{
				{before: func(d *definitions, h *defsHostFake) {
					h.during = func(name string) {
						if name == "ns_vm1" {
							d.changed(defsHost, "ns_vm1")
						}
					}
				}, wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{before: func(_ *definitions, h *defsHostFake) { h.during = nil },
					wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1"}},
			},
		},
		"SubscriptionChangeDuringTheReadKeepsNothing": {
			watched: true,
			steps: []step{
				{before: func(d *definitions, h *defsHostFake) {
					h.during = func(name string) {
						if name == "ns_vm2" {
							d.watched(defsHost) // a second subscription
						}
					}
				}, wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{before: func(_ *definitions, h *defsHostFake) { h.during = nil },
					wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{wantXML: []string{"a", "b"}},
			},
		},
		"LostForgetsEverything": {
			watched: true,
			steps: []step{
				{wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{before: func(d *definitions, _ *defsHostFake) { d.lost(defsHost) },
					wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
			},
		},
		"OldDefinitionsReadAgain": {
			watched: true,
			steps: []step{
				{wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{at: DefinitionMaxAge - time.Second, wantXML: []string{"a", "b"}},
				{at: DefinitionMaxAge, wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
			},
		},
		"RenamedDomainReadAgain": {
			watched: true,
			steps: []step{
				{wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{before: func(_ *definitions, h *defsHostFake) {
					h.doms[1].Name = "ns_renamed"
					h.xml["ns_renamed"] = "r"
				}, wantXML: []string{"a", "r"}, wantRead: []string{"ns_renamed"}},
			},
		},
		"GoneMeanwhileLeftOut": {
			watched: true,
			steps: []step{
				{before: func(_ *definitions, h *defsHostFake) { delete(h.xml, "ns_vm2") },
					wantXML: []string{"a"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{wantXML: []string{"a"}, wantRead: []string{"ns_vm2"}},
			},
		},
		"UndefinedDomainDropped": {
			watched: true,
			steps: []step{
				{wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm1", "ns_vm2"}},
				{before: func(_ *definitions, h *defsHostFake) { h.doms = h.doms[:1] }, wantXML: []string{"a"}},
				{before: func(_ *definitions, h *defsHostFake) { h.doms = append(h.doms, dom(2)) },
					wantXML: []string{"a", "b"}, wantRead: []string{"ns_vm2"}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := &definitions{}
			if tc.watched {
				d.watched(defsHost)
			}
			h := &defsHostFake{doms: []golibvirt.Domain{dom(1), dom(2)}, xml: map[string]string{"ns_vm1": "a", "ns_vm2": "b"}}
			for i, s := range tc.steps {
				if s.before != nil {
					s.before(d, h)
				}
				got := h.read(d, t0.Add(s.at))
				if diff := cmp.Diff(s.wantXML, got); diff != "" {
					t.Errorf("read %d: definitions (-want +got):\n%s", i, diff)
				}
				if diff := cmp.Diff(s.wantRead, h.fetched); diff != "" {
					t.Errorf("read %d: fetched (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

// TestDefinitionsBounded: past maxChanged event epochs a host forgets everything, so the map of
// epochs never grows without bound.
func TestDefinitionsBounded(t *testing.T) {
	d := &definitions{}
	d.watched(defsHost)
	for i := range maxChanged + 10 {
		d.changed(defsHost, "ns_vm"+string(rune('a'+i%26))+string(rune(i)))
	}
	if n := len(d.hosts[defsHost].changed); n > maxChanged {
		t.Errorf("%d event epochs kept, want at most %d", n, maxChanged)
	}
}
