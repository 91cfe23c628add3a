package host

import (
	"testing"
	"time"
)

// TestAbandonedCallProbe checks the stuck-call rule on a session with a fake probe: a call
// that outlived its context leaves the connection up when the connection answers the probe,
// and tears it down when the probe is not answered in time, or when too many abandoned calls
// are outstanding.
func TestAbandonedCallProbe(t *testing.T) {
	cases := map[string]struct {
		probe      func() error
		abandon    int
		wantBroken bool
	}{
		"the connection answers: it stays up": {
			probe: func() error { return nil }, abandon: 1,
		},
		"the connection does not answer: it is torn down": {
			probe: func() error { time.Sleep(time.Second); return nil }, abandon: 1, wantBroken: true,
		},
		"more abandoned calls than maxAbandoned: it is replaced": {
			probe: func() error { return nil }, abandon: maxAbandoned + 1, wantBroken: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := &session{d: &streamDialer{}, probe: tc.probe}
			stuck := make(chan error) // the abandoned calls never return
			for range tc.abandon {
				s.abandoned(stuck, 100*time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond)
			if got := s.broken.Load(); got != tc.wantBroken {
				t.Errorf("broken = %v, want %v", got, tc.wantBroken)
			}
			if got := int(s.outstanding.Load()); got != tc.abandon {
				t.Errorf("outstanding = %d, want %d", got, tc.abandon)
			}
			close(stuck)
			deadline := time.Now().Add(time.Second)
			for s.outstanding.Load() != 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := s.outstanding.Load(); got != 0 {
				t.Errorf("outstanding after the calls returned = %d, want 0", got)
			}
		})
	}
}
