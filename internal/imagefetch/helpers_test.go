package imagefetch

import (
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/sourcepolicy"
)

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// testConfig names the config of the test's Downloads in messages.
const testConfig = "ClusterProviderConfig/test"

// serverPort is the port of a test server on 127.0.0.1.
func serverPort(t testing.TB, srv *httptest.Server) int32 {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return int32(p)
}

// allowServers is an imageSources policy that allows exactly the given test servers on
// 127.0.0.1, each by cidr 127.0.0.1/32 and its port, as a ClusterProviderConfig would.
func allowServers(t testing.TB, srvs ...*httptest.Server) v1alpha1.ImageSourcePolicy {
	t.Helper()
	var p v1alpha1.ImageSourcePolicy
	for _, s := range srvs {
		p.Allow = append(p.Allow, v1alpha1.ImageSourceRule{CIDR: "127.0.0.1/32", Ports: []int32{serverPort(t, s)}})
	}
	return p
}

// downloadsFor compiles p into the Downloads of config testConfig, changed by mods.
func downloadsFor(t testing.TB, p v1alpha1.ImageSourcePolicy, mods ...func(*Downloads)) Downloads {
	t.Helper()
	pol, err := sourcepolicy.New(p)
	if err != nil {
		t.Fatal(err)
	}
	d := Downloads{Config: testConfig, Policy: pol, Limits: sourcepolicy.LimitsOf(p)}
	for _, m := range mods {
		m(&d)
	}
	return d
}
