package probe

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	c := Check{Addr: "192.0.2.10:3128", HTTP: true, URL: "http://example.com/204", Status: 204, Timeout: 5 * time.Second}
	other := Check{Addr: "192.0.2.11:3128", HTTP: true, URL: "http://example.com/204", Status: 204, Timeout: 5 * time.Second}
	errHang := errors.New("no answer")
	fresh := &Result{Check: c, At: now.Add(-Refresh / 2)}
	old := &Result{Check: c, Err: errHang, At: now.Add(-Refresh)}
	type want struct {
		report *Result
		start  bool
	}
	cases := map[string]struct {
		reason string
		e      entry
		want   want
	}{
		"First": {
			reason: "nothing known: report nothing, start a probe",
			want:   want{start: true},
		},
		"Running": {
			reason: "a probe runs: report nothing yet, start none (one at a time per resource)",
			e:      entry{running: &c},
			want:   want{},
		},
		"RunningWithLast": {
			reason: "a probe runs: report the last result of the same check",
			e:      entry{running: &c, last: old},
			want:   want{report: old},
		},
		"Fresh": {
			reason: "a result younger than Refresh is reported and no probe starts",
			e:      entry{last: fresh},
			want:   want{report: fresh},
		},
		"Old": {
			reason: "a result as old as Refresh is reported and the next probe starts",
			e:      entry{last: old},
			want:   want{report: old, start: true},
		},
		"OtherCheck": {
			reason: "a result of another check (the guest's address changed) is never reported; the new check starts",
			e:      entry{last: &Result{Check: other, At: now}},
			want:   want{start: true},
		},
		"OtherCheckRunning": {
			reason: "while a probe of another check runs, nothing is reported and nothing starts (its end wakes the resource)",
			e:      entry{running: &other, last: &Result{Check: other, At: now}},
			want:   want{},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			report, start := decide(tc.e, c, now)
			got := want{report: report, start: start}
			if diff := cmp.Diff(tc.want, got, test.EquateErrors(), cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("\n%s\ndecide(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestChanged(t *testing.T) {
	c := Check{Addr: "192.0.2.10:22", Timeout: time.Second}
	other := Check{Addr: "192.0.2.11:22", Timeout: time.Second}
	errRefused := errors.New("refused")
	errHang := errors.New("no answer")
	cases := map[string]struct {
		prev *Result
		next Result
		want bool
	}{
		"First":           {next: Result{Check: c}, want: true},
		"StillPassing":    {prev: &Result{Check: c}, next: Result{Check: c}, want: false},
		"TurnedFailing":   {prev: &Result{Check: c}, next: Result{Check: c, Err: errHang}, want: true},
		"TurnedPassing":   {prev: &Result{Check: c, Err: errHang}, next: Result{Check: c}, want: true},
		"StillFailing":    {prev: &Result{Check: c, Err: errRefused}, next: Result{Check: c, Err: errHang}, want: false},
		"FirstOfNewCheck": {prev: &Result{Check: other}, next: Result{Check: c}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, changed(tc.prev, tc.next)); diff != "" {
				t.Errorf("changed(...): -want, +got:\n%s", diff)
			}
		})
	}
}

// hangingDial is a dial that blocks until its context ends or release closes, counting the
// dials that run at once.
type hangingDial struct {
	started chan string
	release chan struct{}
}

func (h *hangingDial) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	h.started <- addr
	select {
	case <-ctx.Done():
	case <-h.release:
	}
	return nil, errors.New("no answer from " + addr)
}

// TestProberLimits: ten probes of namespace a that hang hold two slots of the host; a probe
// of namespace b starts while they hang, and its result wakes b's resource. No timing: the
// test waits on channels.
func TestProberLimits(t *testing.T) {
	h := &hangingDial{started: make(chan string, 20), release: make(chan struct{})}
	woken := make(chan types.NamespacedName, 20)
	p := NewProber(WithLimits(8, 2), WithWake(func(nn types.NamespacedName) { woken <- nn }))
	key := func(ns, name string) Key {
		return Key{Host: "host-a", Resource: types.NamespacedName{Namespace: ns, Name: name}}
	}
	check := func(addr string) Check { return Check{Addr: addr, Timeout: time.Hour} }
	for i := range 10 {
		addr := net.JoinHostPort("192.0.2.1", string(rune('0'+i))+"0")
		if r := p.Observe(key("a", addr), check(addr), h.dial); r != nil {
			t.Fatalf("Observe of a new probe: want no result, got %+v", r)
		}
	}
	got := []string{<-h.started, <-h.started}
	if r := p.Observe(key("b", "vm"), check("192.0.2.2:22"), h.dial); r != nil {
		t.Fatalf("Observe of b's new probe: want no result, got %+v", r)
	}
	// b's probe starts although a's ten hang: a holds only its two slots.
	got = append(got, <-h.started)
	select {
	case extra := <-h.started:
		t.Fatalf("a third probe of namespace a started (%s): its share is two", extra)
	default:
	}
	if diff := cmp.Diff("192.0.2.2:22", got[2]); diff != "" {
		t.Errorf("third probe to start: -want, +got:\n%s", diff)
	}
	close(h.release) // every probe fails now
	if diff := cmp.Diff(types.NamespacedName{Namespace: "b", Name: "vm"}, waitFor(woken, "b")); diff != "" {
		t.Errorf("woken: -want, +got:\n%s", diff)
	}
	r := p.Observe(key("b", "vm"), check("192.0.2.2:22"), h.dial)
	want := &Result{Check: check("192.0.2.2:22"), Err: errors.Wrap(errors.New("no answer from 192.0.2.2:22"), "cannot connect to 192.0.2.2:22")}
	if diff := cmp.Diff(want, r, test.EquateErrors(), cmpopts.IgnoreFields(Result{}, "At")); diff != "" {
		t.Errorf("Observe after the result: -want, +got:\n%s", diff)
	}
}

// waitFor returns the first wake of namespace ns.
func waitFor(ch chan types.NamespacedName, ns string) types.NamespacedName {
	for nn := range ch {
		if nn.Namespace == ns {
			return nn
		}
	}
	return types.NamespacedName{}
}
