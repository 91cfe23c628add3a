package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/sourcepolicy"
)

func TestPlatformOf(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := map[string]struct {
		path    string
		require bool
		want    sourcepolicy.Platform
		wantErr string
	}{
		"None":    {want: sourcepolicy.Platform{}},
		"Require": {require: true, want: sourcepolicy.Platform{RequireSHA256: true}},
		"File": {
			path: write("ok.yaml", "allow:\n- cidr: 10.20.30.40/32\n  ports: [8080]\nmaxImageSizeMiB: 4096\nrequireSHA256: true\n"),
			want: sourcepolicy.Platform{Namespaced: v1alpha1.ImageSourcePolicy{
				Allow:           []v1alpha1.ImageSourceRule{{CIDR: "10.20.30.40/32", Ports: []int32{8080}}},
				MaxImageSizeMiB: 4096, RequireSHA256: true,
			}},
		},
		"UnknownField": {path: write("typo.yaml", "alow: []\n"), wantErr: "cannot parse --namespaced-image-sources"},
		"BadRule":      {path: write("bad.yaml", "allow:\n- cidr: nonsense\n"), wantErr: "invalid --namespaced-image-sources"},
		"Missing":      {path: filepath.Join(dir, "missing.yaml"), wantErr: "cannot read --namespaced-image-sources"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := platformOf(tc.path, tc.require)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("platformOf(...): got error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("platformOf(...): -want, +got:\n%s", diff)
			}
		})
	}
}

func TestCheckClusterID(t *testing.T) {
	cases := map[string]struct {
		id   string
		want bool // valid
	}{
		"None":        {id: "", want: true},
		"Label":       {id: "prod-eu-1", want: true},
		"Upper":       {id: "Prod"},
		"Dots":        {id: "prod.eu"},
		"TooLong":     {id: strings.Repeat("a", 64)},
		"LeadingDash": {id: "-prod"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if err := checkClusterID(tc.id); (err == nil) != tc.want {
				t.Errorf("checkClusterID(%q) = %v, want valid %t", tc.id, err, tc.want)
			}
		})
	}
}
