package controlplane

import (
	"context"
	"net/netip"
	"net/url"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// AllowImageServer lets BaseImages of ClusterProviderConfig name download from the test image
// server at serverURL: an imageSources allow rule naming exactly its address and port (cidr
// 127.0.0.1/32 and the port), since the built-in denial refuses loopback otherwise.
func (e *Env) AllowImageServer(t testing.TB, name, serverURL string) {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("image server %s has no port: %v", serverURL, err)
	}
	ip, err := netip.ParseAddr(u.Hostname())
	if err != nil {
		t.Fatalf("image server %s is not at an IP address: %v", serverURL, err)
	}
	rule := v1alpha1.ImageSourceRule{CIDR: netip.PrefixFrom(ip, ip.BitLen()).String(), Ports: []int32{int32(port)}} //nolint:gosec // a TCP port
	ctx := context.Background()
	// The config controller writes the status meanwhile: retry on conflicts.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cpc := &v1alpha1.ClusterProviderConfig{}
		if err := e.Client.Get(ctx, types.NamespacedName{Name: name}, cpc); err != nil {
			return err
		}
		cpc.Spec.ImageSources.Allow = append(cpc.Spec.ImageSources.Allow, rule)
		return e.Client.Update(ctx, cpc)
	})
	if err != nil {
		t.Fatalf("allowing image server %s in ClusterProviderConfig %s: %v", serverURL, name, err)
	}
}
