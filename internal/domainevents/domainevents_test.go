package domainevents

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"
)

func TestResource(t *testing.T) {
	cases := map[string]struct {
		domain string
		want   types.NamespacedName
		ok     bool
	}{
		"Ours":           {domain: "team-a_proxy-1", want: types.NamespacedName{Namespace: "team-a", Name: "proxy-1"}, ok: true},
		"DottedName":     {domain: "team-a_web.v2", want: types.NamespacedName{Namespace: "team-a", Name: "web.v2"}, ok: true},
		"NoSeparator":    {domain: "bootcheck-1700000000-42"},
		"UpperCase":      {domain: "Team_a"},
		"EmptyName":      {domain: "team-a_"},
		"SecondUnderbar": {domain: "team-a_a_b"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := Resource(tc.domain)
			if diff := cmp.Diff([]any{tc.want, tc.ok}, []any{got, ok}); diff != "" {
				t.Errorf("Resource(%q): -want, +got:\n%s", tc.domain, diff)
			}
		})
	}
}

func TestNotifyAndLost(t *testing.T) {
	w := New(logging.NewNopLogger())
	for _, b := range []struct{ ns, name, host string }{{"team-a", "vm", "h1"}, {"team-b", "db", "h2"}, {"team-a", "gone", "h1"}} {
		w.Bind(types.NamespacedName{Namespace: b.ns, Name: b.name}, b.host)
	}
	w.notify("h1", "team-a_vm", true)
	w.notify("h1", "not-ours", true)
	w.notify("h2", "team-b_db", true)
	w.notify("h1", "team-a_gone", false) // undefined: requeued once, then forgotten
	got := drain(w)
	if diff := cmp.Diff([]string{"team-a/vm", "team-b/db", "team-a/gone"}, got); diff != "" {
		t.Errorf("requests from events: -want, +got:\n%s", diff)
	}
	// The connection to h1 ends: every KVMDomain last seen there is requeued, none of h2's.
	w.lost("h1")
	if diff := cmp.Diff([]string{"team-a/vm"}, drain(w)); diff != "" {
		t.Errorf("requests after h1 was lost: -want, +got:\n%s", diff)
	}
}

// TestLostWakesAFew: a lost host with many KVMDomains requeues MaxLostWake of them, not all:
// no storm of reconciles when libvirtd restarts under a thousand domains.
func TestLostWakesAFew(t *testing.T) {
	w := New(logging.NewNopLogger())
	for i := range 3 * MaxLostWake {
		name := fmt.Sprintf("vm%d", i)
		w.Bind(types.NamespacedName{Namespace: "team-a", Name: name}, "h1")
		w.notify("h1", "team-a_"+name, true)
	}
	w.Bind(types.NamespacedName{Namespace: "team-b", Name: "db"}, "h2")
	w.notify("h2", "team-b_db", true)
	drain(w)
	w.lost("h1")
	got := drain(w)
	if len(got) != MaxLostWake {
		t.Errorf("%d KVMDomains requeued after h1 was lost, want %d: %v", len(got), MaxLostWake, got)
	}
	for _, g := range got {
		if !strings.HasPrefix(g, "team-a/") {
			t.Errorf("%s requeued after h1 was lost; it is on h2", g)
		}
	}
}

func drain(w *Watcher) []string {
	var out []string
	for {
		select {
		case ev := <-w.ch:
			out = append(out, ev.Object.GetNamespace()+"/"+ev.Object.GetName())
		default:
			return out
		}
	}
}

// TestEventsMatchedByHost: a host's events requeue only the KVMDomains bound to that host: a
// team's own host that defines domains named after another team's KVMDomains requeues nothing.
func TestEventsMatchedByHost(t *testing.T) {
	vm := types.NamespacedName{Namespace: "team-a", Name: "vm"}
	cases := map[string]struct {
		reason string
		bind   map[types.NamespacedName]string
		events []struct{ host, domain string }
		unbind []types.NamespacedName // after the events
		lost   string
		want   []string
	}{
		"OwnHost": {
			reason: "an event of the host the KVMDomain is on requeues it",
			bind:   map[types.NamespacedName]string{vm: "root@shared:22"},
			events: []struct{ host, domain string }{{"root@shared:22", "team-a_vm"}},
			want:   []string{"team-a/vm"},
		},
		"OtherHost": {
			reason: "a same-named domain on another host (an attacker's own) requeues nothing",
			bind:   map[types.NamespacedName]string{vm: "root@shared:22"},
			events: []struct{ host, domain string }{{"root@team-b-host:22", "team-a_vm"}, {"root@team-b-host:22", "team-a_vm"}},
			want:   nil,
		},
		"OtherHostLost": {
			reason: "losing the attacker's host does not requeue KVMDomains it named",
			bind:   map[types.NamespacedName]string{vm: "root@shared:22"},
			events: []struct{ host, domain string }{{"root@team-b-host:22", "team-a_vm"}},
			lost:   "root@team-b-host:22",
			want:   nil,
		},
		"Unbound": {
			reason: "a KVMDomain not reconciled yet is not requeued by events",
			events: []struct{ host, domain string }{{"root@shared:22", "team-a_vm"}},
			want:   nil,
		},
		"Unbind": {
			reason: "a KVMDomain whose deletion finished is forgotten: its host's events and the loss of its host requeue nothing",
			bind:   map[types.NamespacedName]string{vm: "root@shared:22"},
			unbind: []types.NamespacedName{vm},
			events: []struct{ host, domain string }{{"root@shared:22", "team-a_vm"}},
			lost:   "root@shared:22",
			want:   nil,
		},
		"Rebound": {
			reason: "a KVMDomain moved to another host follows its new host's events only",
			bind:   map[types.NamespacedName]string{vm: "root@new:22"},
			events: []struct{ host, domain string }{{"root@old:22", "team-a_vm"}, {"root@new:22", "team-a_vm"}},
			want:   []string{"team-a/vm"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := New(logging.NewNopLogger())
			for nn, h := range tc.bind {
				w.Bind(nn, h)
			}
			for _, e := range tc.events {
				w.notify(e.host, e.domain, true)
			}
			if len(tc.unbind) > 0 {
				drain(w) // what the events requeued before the deletion finished
			}
			for _, nn := range tc.unbind {
				w.Unbind(nn)
				w.notify("root@shared:22", nn.Namespace+"_"+nn.Name, true)
			}
			if tc.lost != "" {
				w.lost(tc.lost)
			}
			if diff := cmp.Diff(tc.want, drain(w)); diff != "" {
				t.Errorf("%s\nrequests: -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
