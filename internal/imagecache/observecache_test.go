package imagecache

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// What Lookup remembers of a record counts only for the fingerprint it was read with, and
// for at most its recheck period.
func TestMemo(t *testing.T) {
	fp := libvirt.VolumeInfo{CapacityBytes: 300, AllocationBytes: 4096}
	rec := &Record{Volume: "v"}
	cases := map[string]struct {
		reason string
		fp     libvirt.VolumeInfo
		after  time.Duration
		want   bool
	}{
		"Same":       {reason: "same fingerprint, within the period", fp: fp, want: true},
		"Resized":    {reason: "another capacity", fp: libvirt.VolumeInfo{CapacityBytes: 301, AllocationBytes: 4096}},
		"Refilled":   {reason: "another allocation", fp: libvirt.VolumeInfo{CapacityBytes: 300, AllocationBytes: 8192}},
		"PeriodOver": {reason: "read longer ago than the recheck period", fp: fp, after: DefaultRecheck},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			m := &memo{m: map[string]memoEntry{}, now: func() time.Time { return now }, recheck: DefaultRecheck}
			m.put("k", memoEntry{fp: fp, rec: rec})
			now = now.Add(tc.after)
			_, got := m.get("k", tc.fp)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: get(): -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}
