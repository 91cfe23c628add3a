package domainevents

import (
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
