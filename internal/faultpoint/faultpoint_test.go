package faultpoint

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	cases := map[string]struct {
		in     string
		want   Target
		wantOK bool
	}{
		"Empty":       {in: ""},
		"Blank":       {in: "  "},
		"Name":        {in: BaseClaimWritten, want: Target{Name: BaseClaimWritten, N: 1}, wantOK: true},
		"NthReach":    {in: BaseMidUpload + "#3", want: Target{Name: BaseMidUpload, N: 3}, wantOK: true},
		"ZerothReach": {in: BaseMidUpload + "#0"},
		"NotANumber":  {in: BaseMidUpload + "#x"},
		"NoName":      {in: "#2"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := Parse(tc.in)
			if ok != tc.wantOK {
				t.Errorf("Parse(%q): ok %v, want %v", tc.in, ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse(%q): -want +got:\n%s", tc.in, diff)
			}
		})
	}
}

func TestPointsAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range Points {
		if seen[p] {
			t.Errorf("point %s is listed twice", p)
		}
		seen[p] = true
	}
}
