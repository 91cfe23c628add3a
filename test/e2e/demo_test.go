//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
)

// TestDemo is make demo after the bring-up (cluster/e2e/demo.sh up): the
// installation, then Proxy demo/squid, which caches its own image; it waits until the Proxy
// is Ready, checks its Secret and a 204 through it, and prints how to use it. Run again while
// the demo is up, it finds the Proxy and only checks it and prints the usage. On failure it
// deletes the Proxy it created through Kubernetes.
func TestDemo(t *testing.T) {
	e := requireEnv(t, ModeDemo)
	ctx := context.Background()
	if err := e.waitServers(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.install(ctx); err != nil {
		t.Fatal(err)
	}
	p := newUnstructured(gvkProxy, "demo", "squid")
	existed := e.c.Get(ctx, client.ObjectKeyFromObject(p), p.DeepCopy()) == nil
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		e.diagnose(ctx, []string{"demo"})
		if !existed {
			if err := e.teardown(ctx, []string{"demo"}, nil, 240*time.Second, 240*time.Second); err != nil {
				warnf("%v", err)
			}
		}
	})
	if existed {
		logf("the demo is already up")
		if err := waitFor(ctx, "Proxy demo/squid Ready", 2*time.Second, e.cfg.GuestTimeout, func(ctx context.Context) error {
			cur := newUnstructured(gvkProxy, "demo", "squid")
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
				return err
			}
			return conditionTrue("Proxy", "demo/squid", unstructuredCondition(cur, xpv2.TypeReady))
		}); err != nil {
			t.Fatal(err)
		}
	} else {
		vals := e.values()
		if !e.cfg.BringUpStart.IsZero() {
			logf("node, Crossplane, functions and provider up in %ss", secs(time.Since(e.cfg.BringUpStart)))
		}
		logf("creating Proxy demo/squid (caches the guest image from %s, then boots it; several minutes under TCG)", vals["IMAGE_URL_DEMO"])
		t0 := time.Now()
		if err := e.apply(ctx, "demo.yaml", vals); err != nil {
			t.Fatal(err)
		}
		if err := e.watch(ctx, p, "squid", "demo/squid", t0); err != nil {
			t.Fatal(err)
		}
		if err := e.checkEndpoint(ctx, "demo/squid", "demo", "squid-proxy", p); err != nil {
			t.Fatal(err)
		}
		// The pod the usage prints, run once: it must work as printed.
		if err := e.runAppPod(ctx, demoPod(e.probeURL)); err != nil {
			t.Fatal(err)
		}
		up := ""
		if !e.cfg.BringUpStart.IsZero() {
			up = " in " + secs(time.Since(e.cfg.BringUpStart)) + "s"
		}
		logf("demo up%s (Proxy created -> Ready: %ss)", up, secs(time.Since(t0)))
	}
	data, err := e.secretData(ctx, "demo", "squid-proxy")
	if err != nil {
		t.Fatal(err)
	}
	pod, err := demoPod(e.probeURL).manifest(e.cfg.Repo, e.cfg.ClientImage, e.values())
	if err != nil {
		t.Fatal(err)
	}
	e.usage(string(data["url"]), string(data["ip"])+":"+string(data["port"]), pod)
}

func (e *env) usage(url, addr, pod string) {
	fmt.Printf(`
The demo is running: Proxy demo/squid is Ready (a squid VM on host %[4]s of the LAN test bed,
booted under TCG), on the single-node Kubernetes in network namespace %[1]s, where Crossplane
and the provider run as pods. The LAN and the guests are reachable only from that namespace.

  # kubectl against the node's API server:
  cluster/node/kubectl.sh -n demo get proxy squid
  cluster/node/kubectl.sh -n demo get seedvolumes,kvmdomains,baseimages,secrets
  cluster/node/kubectl.sh -n demo get secret squid-proxy -o jsonpath='{.data.url}' | base64 -d

  # use the proxy: pods use the Secret's url, %[2]s (its Service), here the guest's
  # address behind it, %[6]s:
  ip netns exec %[1]s curl -sS -o /dev/null -w '%%{http_code}\n' -x http://%[6]s %[3]s

  # an application pod in namespace demo, as a team writes it: HTTP_PROXY from the Secret,
  # the Service's name resolved by cluster DNS (examples/app/proxy-client.yaml with the node's
  # httpget image, cluster/node/httpget); its log shows 204 for the origin and squid's 403
  # naming the rule (ERR_PROXY_DST_PRIVATE) for a private address:
  cluster/node/kubectl.sh apply -f - <<'YAML'
%[8]s
YAML
  cluster/node/kubectl.sh -n demo logs proxy-client      # once it has Completed
  cluster/node/kubectl.sh -n demo delete pod proxy-client

  # the VM on the host (its libvirtd's socket, as this machine sees it):
  virsh -c 'qemu+unix:///system?socket=%[7]s' list --all        (domain demo_squid)

Logs: %[5]s    Stop and clean up: make demo-down

`, e.cfg.Netns, url, e.probeURL, e.cfg.Hosts[0].SSHHost, e.cfg.Logs, addr, e.cfg.Hosts[0].Socket, strings.TrimSpace(pod))
}
