package function

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
)

var updateSquid = flag.Bool("update-squid", false, "rewrite testdata/squid from what SquidConf writes now")

// TestSquidConfGolden compares the squid configuration and denial pages of each destination
// rule set with testdata/squid/<case>.conf (go test -run TestSquidConfGolden -update-squid
// rewrites them; review the diff). TestRealSquidDestinationRules runs them on squid.
func TestSquidConfGolden(t *testing.T) {
	lab := []ppv1.NamedRange{{Name: "lab-lan", CIDR: "10.77.0.0/24"}, {Name: "libvirt-host", CIDR: "192.168.122.1/32"}}
	cases := map[string]struct {
		policy ppv1.Rules
		spec   ProxySpec
	}{
		"defaults": {},
		"allowed-domains": {
			policy: ppv1.Rules{Destinations: &ppv1.Destinations{AllowedRanges: lab}},
			spec:   ProxySpec{AllowedDomains: []string{".example.com", "www.example.com", "deb.debian.org"}},
		},
		"team-directives": {
			policy: ppv1.Rules{Destinations: &ppv1.Destinations{AllowedRanges: lab}},
			spec:   ProxySpec{SquidDirectives: []string{"acl blocked dstdomain .ads.example.com", "http_access deny blocked", "http_access allow all"}},
		},
		"report": {
			policy: ppv1.Rules{Destinations: &ppv1.Destinations{Mode: ppv1.DestinationReport, DefaultAllowedDomains: []string{".example.com"}}},
		},
		"private-only": {
			policy: ppv1.Rules{Destinations: &ppv1.Destinations{DeniedRanges: []ppv1.RangeClass{ppv1.RangePrivate}}, ClientCIDRs: []string{"0.0.0.0/0"}},
			spec:   ProxySpec{AllowedCIDRs: []string{"0.0.0.0/0"}},
		},
		"none-denied": {
			policy: ppv1.Rules{Destinations: &ppv1.Destinations{DeniedRanges: []ppv1.RangeClass{}, AllowedRanges: lab}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, err := ResolveRules(tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			tc.spec.Image = ImageSpec{BaseImageName: "debian-12"}
			tc.spec.Port = ptr.To[int64](3128)
			p, err := tc.spec.Validate()
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Apply(&p); err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			b.WriteString(SquidConf(p, "web"))
			for _, pg := range SquidErrorPages(p) {
				b.WriteString("\n# ---- " + SquidErrorPagesDir + "/" + pg.Name + "\n" + pg.Content)
			}
			got := b.String()
			path := filepath.Join("testdata", "squid", name+".conf")
			if *updateSquid {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update-squid to write it)", err)
			}
			if d := cmp.Diff(string(want), got); d != "" {
				t.Errorf("%s (-want +got):\n%s", path, d)
			}
		})
	}
}
