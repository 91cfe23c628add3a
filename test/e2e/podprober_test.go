//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// podProberEvery is how often the prober pod sends its request.
const podProberEvery = "500ms"

// podProber is an application pod that sends a request through a Proxy every 0.5 s, as
// examples/app/proxy-client.yaml does once: HTTP_PROXY from the Proxy's Secret, the Service's
// cluster DNS name resolved by the pod, kube-proxy taking the request to a replica. It runs
// httpget (cluster/node/httpget) with HTTPGET_EVERY, which prints one line per request.
type podProber struct {
	ns, name string
	cs       *kubernetes.Clientset // for the pod's logs
}

// startPodProber runs a prober pod named name in ns through Proxy proxy and waits until it
// printed its first 204, so that what follows is measured from a working path.
func (e *env) startPodProber(ctx context.Context, ns, name, proxy string) (*podProber, error) {
	if err := e.deletePod(ctx, ns, name); err != nil {
		return nil, err
	}
	secret := proxy + "-proxy"
	fromSecret := &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "url"}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(1)),
			SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)), RunAsGroup: ptr.To(int64(65532))},
			Containers: []corev1.Container{{
				Name:  "app",
				Image: e.cfg.ClientImage,
				Args:  []string{e.probeURL},
				Env: []corev1.EnvVar{
					{Name: "HTTP_PROXY", ValueFrom: fromSecret},
					{Name: "http_proxy", ValueFrom: fromSecret},
					{Name: "HTTPGET_EVERY", Value: podProberEvery},
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
	if err := e.c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("create prober pod %s/%s: %w", ns, name, err)
	}
	cs, err := e.clientset()
	if err != nil {
		return nil, err
	}
	p := &podProber{ns: ns, name: name, cs: cs}
	err = waitFor(ctx, "prober pod "+ns+"/"+name+" to answer 204", time.Second, 120*time.Second, func(ctx context.Context) error {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s%s", pod.Status.Phase, waiting(pod))
		}
		r, err := p.read(ctx)
		if err != nil {
			return err
		}
		if r.ok == 0 {
			return fmt.Errorf("no 204 yet (%d failed)", len(r.failures))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// proberLine is one line httpget printed in HTTPGET_EVERY mode: the round's time, then the
// status or ERROR.
var proberLine = regexp.MustCompile(`^(\d\d:\d\d:\d\d\.\d) (\d{3}|ERROR) `)

// proberResult is what a prober pod saw: requests answered 204, and the others' lines.
type proberResult struct {
	ok       int
	failures []string
}

// read counts the pod's lines so far (its first line, the proxy's address, is not a request).
func (p *podProber) read(ctx context.Context) (proberResult, error) {
	logs, err := p.cs.CoreV1().Pods(p.ns).GetLogs(p.name, &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
	if err != nil {
		return proberResult{}, fmt.Errorf("logs of prober pod %s/%s: %w", p.ns, p.name, err)
	}
	return parseProber(string(logs)), nil
}

// parseProber counts httpget's HTTPGET_EVERY lines.
func parseProber(logs string) proberResult {
	var r proberResult
	for _, l := range strings.Split(logs, "\n") {
		m := proberLine.FindStringSubmatch(l)
		switch {
		case m == nil:
		case m[2] == "204":
			r.ok++
		default:
			r.failures = append(r.failures, truncate(l, 200))
		}
	}
	return r
}

// stop reads what the pod saw and deletes it.
func (p *podProber) stop(ctx context.Context, e *env) (proberResult, error) {
	r, err := p.read(ctx)
	if derr := e.deletePod(ctx, p.ns, p.name); err == nil {
		err = derr
	}
	return r, err
}

// TestParseProber applies nothing (make e2e's preflight runs it): the prober pod's lines are
// counted as httpget prints them, its first line and anything unlike a round not counted.
func TestParseProber(t *testing.T) {
	logs := "proxy http://build-cache-proxy.team-b.svc:3128 resolves to 10.96.0.57\n" +
		`12:04:05.0 204 http://10.77.0.10:18204/ via="1.1 build-cache (squid/5.7)"` + "\n" +
		"12:04:05.5 ERROR http://10.77.0.10:18204/ context deadline exceeded\n" +
		`12:04:06.0 503 http://10.77.0.10:18204/ via="1.1 build-cache (squid/5.7)"` + "\n" +
		`12:04:06.5 204 http://10.77.0.10:18204/ via="1.1 build-cache (squid/5.7)"` + "\n" +
		"garbage 204\n"
	got := parseProber(logs)
	want := proberResult{ok: 2, failures: []string{
		"12:04:05.5 ERROR http://10.77.0.10:18204/ context deadline exceeded",
		`12:04:06.0 503 http://10.77.0.10:18204/ via="1.1 build-cache (squid/5.7)"`,
	}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(proberResult{})); diff != "" {
		t.Errorf("parseProber: -want +got:\n%s", diff)
	}
}
