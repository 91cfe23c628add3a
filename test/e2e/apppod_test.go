//go:build e2e

package e2e

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestAppPods applies nothing (make e2e's preflight runs it): the application pods of make
// e2e and make demo are examples/app/proxy-client.yaml with the test bed's image, Proxy and
// URLs; and what the pods print is judged as it must be.
func TestAppPods(t *testing.T) {
	e := &env{cfg: defaultConfig(), imageSHA256: strings.Repeat("0", 64), probeURL: "http://10.77.0.10:18204/"}
	e.guestCIDR, e.cfg.ImageHost = "10.77.0.10/24", "10.77.0.10"
	for _, p := range append(teamAPods(e.probeURL), demoPod(e.probeURL)) {
		t.Run(p.NS+"/"+p.Name, func(t *testing.T) {
			text, err := p.manifest(e.cfg.Repo, e.cfg.ClientImage, e.values())
			if err != nil {
				t.Fatal(err)
			}
			for _, gone := range []string{"curl", "deb.debian.org", "#"} {
				if strings.Contains(text, gone) {
					t.Errorf("%q is still in the manifest:\n%s", gone, text)
				}
			}
			objs, err := decode(exAppFile, text)
			if err != nil || len(objs) != 1 {
				t.Fatalf("%d objects, %v", len(objs), err)
			}
			pod := &corev1.Pod{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[0].Object, pod); err != nil {
				t.Fatal(err)
			}
			type view struct {
				NS, Name, Image string
				Args            []string
				Env             map[string]string
			}
			got := view{NS: pod.Namespace, Name: pod.Name, Env: map[string]string{}}
			if len(pod.Spec.Containers) == 1 {
				c := pod.Spec.Containers[0]
				got.Image, got.Args = c.Image, c.Args
				for _, v := range c.Env {
					if r := v.ValueFrom; r != nil && r.SecretKeyRef != nil {
						got.Env[v.Name] = "secret " + r.SecretKeyRef.Name + "/" + r.SecretKeyRef.Key
					}
				}
			}
			want := view{NS: p.NS, Name: p.Name, Image: DefaultClientImage,
				Env: map[string]string{"HTTP_PROXY": "secret " + p.Proxy + "-proxy/url", "http_proxy": "secret " + p.Proxy + "-proxy/url"}}
			for _, g := range p.Gets {
				want.Args = append(want.Args, g.URL)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the pod: -want +got:\n%s", diff)
			}
		})
	}
}

// TestHTTPGetCheck: what httpget prints (cluster/node/httpget) passes only when every GET
// answered as the pod must see it, through squid, via the Service.
func TestHTTPGetCheck(t *testing.T) {
	p := appPod{NS: "team-a", Name: "c", Proxy: "egress-a", Gets: []appGet{
		{URL: "http://10.77.0.10:18204/", Code: 204},
		{URL: deniedPrivate, Code: 403, Page: "ERR_PROXY_DST_PRIVATE"},
	}}
	const secretURL, clusterIP = "http://egress-a-proxy.team-a.svc:3128", "10.96.0.57"
	head := "proxy http://egress-a-proxy.team-a.svc:3128 resolves to 10.96.0.57\n"
	ok204 := `204 http://10.77.0.10:18204/ via="1.1 egress-a (squid/5.7)"` + "\n"
	ok403 := `403 http://172.16.0.1:8080/ via="1.1 egress-a (squid/5.7)" squid-error="ERR_PROXY_DST_PRIVATE 0"` + "\n"
	cases := map[string]struct {
		reason  string
		out     string
		want    []string
		wantErr bool
	}{
		"Good": {
			reason: "The origin's 204 and the private address's 403 naming the rule, both through squid.",
			out:    head + ok204 + ok403,
		},
		"NoVia": {
			reason: "A 204 without squid's Via header did not come through the proxy.",
			out:    head + `204 http://10.77.0.10:18204/ via=""` + "\n" + ok403,
			want:   []string{"GET http://10.77.0.10:18204/: 204 without a Via header: the answer did not come through squid"},
		},
		"OtherRule": {
			reason: "A 403 by another rule is not the private-range rule's.",
			out:    head + ok204 + `403 http://172.16.0.1:8080/ via="1.1 x" squid-error="ERR_ACCESS_DENIED 0"` + "\n",
			want:   []string{`GET http://172.16.0.1:8080/: X-Squid-Error "ERR_ACCESS_DENIED 0", want ERR_PROXY_DST_PRIVATE`},
		},
		"Allowed": {
			reason: "A private address that answers is a widening.",
			out:    head + ok204 + `200 http://172.16.0.1:8080/ via="1.1 x"` + "\n",
			want:   []string{`GET http://172.16.0.1:8080/: 200, want 403 (X-Squid-Error "")`},
		},
		"NotTheService": {
			reason: "The proxy's name must resolve to the Service's cluster IP, and be the Secret's url.",
			out:    "proxy http://10.77.0.150:3128 resolves to 10.77.0.150\n" + ok204 + ok403,
			want: []string{`the proxy is "http://10.77.0.150:3128", not the Secret's url "http://egress-a-proxy.team-a.svc:3128"`,
				"the proxy's name resolved to [10.77.0.150], not the Service's cluster IP 10.96.0.57"},
		},
		"Unanswered": {
			reason: "A GET without an answer, and one not printed at all, fail.",
			out:    head + "ERROR http://10.77.0.10:18204/ dial tcp 10.96.0.57:3128: connect: connection refused\n",
			want: []string{"GET http://10.77.0.10:18204/: dial tcp 10.96.0.57:3128: connect: connection refused",
				"GET http://172.16.0.1:8080/: no answer printed"},
		},
		"NoProxyLine": {
			reason:  "Output without the proxy line is not httpget's.",
			out:     "neither HTTP_PROXY nor http_proxy is set\n",
			wantErr: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o, err := parseHTTPGet(tc.out)
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s\nparseHTTPGet: %v, want error %v", tc.reason, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, p.check(o, secretURL, clusterIP)); diff != "" {
				t.Errorf("%s\ncheck: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}
