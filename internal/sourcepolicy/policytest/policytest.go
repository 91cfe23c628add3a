// Package policytest is test support for the packages that download images (imagefetch,
// imagecache): image sources on loopback test servers, allowed as a ClusterProviderConfig's
// imageSources would allow them.
package policytest

import (
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/sourcepolicy"
)

// ServerPort is the port of a test server on 127.0.0.1.
func ServerPort(t testing.TB, srv *httptest.Server) int32 {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.ParseInt(u.Port(), 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return int32(p)
}

// AllowServers is an imageSources policy that allows exactly the given test servers on
// 127.0.0.1, each by cidr 127.0.0.1/32 and its port, as a ClusterProviderConfig would.
func AllowServers(t testing.TB, srvs ...*httptest.Server) v1alpha1.ImageSourcePolicy {
	t.Helper()
	var p v1alpha1.ImageSourcePolicy
	for _, s := range srvs {
		p.Allow = append(p.Allow, v1alpha1.ImageSourceRule{CIDR: "127.0.0.1/32", Ports: []int32{ServerPort(t, s)}})
	}
	return p
}

// Compile is p as a policy and its limits.
func Compile(t testing.TB, p v1alpha1.ImageSourcePolicy) (*sourcepolicy.Policy, sourcepolicy.Limits) {
	t.Helper()
	pol, err := sourcepolicy.New(p)
	if err != nil {
		t.Fatal(err)
	}
	return pol, sourcepolicy.LimitsOf(p)
}
