//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The application pod's path (docs/e2e.md): examples/app/proxy-client.yaml, a Pod with
// HTTP_PROXY and http_proxy from a Proxy's Secret (valueFrom.secretKeyRef), run in the Proxy's
// namespace with the node's httpget image (cluster/node/httpget) in place of the example's
// curl. httpget resolves the Secret's url, the Service's cluster DNS name, through the pod's
// resolver, sends its GETs through it (kube-proxy takes them to the guest's squid) and prints
// each status, squid's Via header and X-Squid-Error.
const (
	exAppFile    = "examples/app/proxy-client.yaml"
	exAppNS      = "namespace: team-a"
	exAppName    = "name: proxy-client"
	exAppSecret  = "egress-a-proxy"
	exAppImage   = "image: docker.io/curlimages/curl:8.11.1"
	exAppCommand = `command: [curl, -sS, -o, /dev/null, -w, "%{http_code}\n", http://deb.debian.org/debian/dists/bookworm/Release]`

	// deniedPrivate is a private address no allowed range of the shipped policy covers.
	deniedPrivate = "http://172.16.0.1:8080/"
	// deniedDomain is a host outside every allowedDomains of the examples.
	deniedDomain = "http://example.com/"
)

// appGet is one GET of an application pod and what it must answer.
type appGet struct {
	URL  string
	Code int
	// Page is the start of squid's X-Squid-Error (the denial page naming the rule), "" when
	// squid sent none.
	Page string
}

// appPod is an application pod: in namespace NS, named Name, using the Proxy Proxy (its
// Secret <Proxy>-proxy), asking for each of Gets.
type appPod struct {
	NS, Name, Proxy string
	Gets            []appGet
}

// example is examples/app/proxy-client.yaml made this pod, running image.
func (p appPod) example(image string) example {
	urls := make([]string, 0, len(p.Gets))
	for _, g := range p.Gets {
		urls = append(urls, strconv.Quote(g.URL))
	}
	return example{File: exAppFile, Subst: [][2]string{
		{exAppNS, "namespace: " + p.NS},
		{exAppName, "name: " + p.Name},
		{exAppSecret, p.Proxy + "-proxy"},
		{exAppImage, "image: " + image},
		{exAppCommand, "args: [" + strings.Join(urls, ", ") + "]"},
	}}
}

// manifest is the pod's manifest: the example with the substitutions, without its comment
// lines (they speak of team-a's egress-a).
func (p appPod) manifest(repo, image string, vals map[string]string) (string, error) {
	b, err := os.ReadFile(filepath.Join(repo, exAppFile))
	if err != nil {
		return "", err
	}
	text, err := p.example(image).substitute(string(b), vals)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, l := range strings.SplitAfter(text, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out.WriteString(l)
		}
	}
	return out.String(), nil
}

// teamAPods are team-a's application pods in make e2e: one through egress-a (no
// allowedDomains: the origin, on the LAN the policy allows by name, answers 204; a private
// address gets the private-range rule's 403) and one through egress-b (allowedDomains: the
// origin's address and .debian.org; a host outside them and the private address get the
// domain rule's 403, which squid checks first).
func teamAPods(origin string) []appPod {
	return []appPod{
		{NS: "team-a", Name: "proxy-client-a", Proxy: "egress-a", Gets: []appGet{
			{URL: origin, Code: 204},
			{URL: deniedPrivate, Code: 403, Page: "ERR_PROXY_DST_PRIVATE"},
		}},
		{NS: "team-a", Name: "proxy-client-b", Proxy: "egress-b", Gets: []appGet{
			{URL: origin, Code: 204},
			{URL: deniedDomain, Code: 403, Page: "ERR_PROXY_DOMAIN_NOT_ALLOWED"},
			{URL: deniedPrivate, Code: 403, Page: "ERR_PROXY_DOMAIN_NOT_ALLOWED"},
		}},
	}
}

// demoPod is make demo's application pod: through demo/squid, the origin and a private
// address.
func demoPod(origin string) appPod {
	return appPod{NS: "demo", Name: "proxy-client", Proxy: "squid", Gets: []appGet{
		{URL: origin, Code: 204},
		{URL: deniedPrivate, Code: 403, Page: "ERR_PROXY_DST_PRIVATE"},
	}}
}

// httpgetOutput is what httpget printed: the proxy, the addresses its name resolved to, and
// one answer per URL.
type httpgetOutput struct {
	Proxy   string
	Addrs   []string
	Answers map[string]httpgetAnswer
}

// httpgetAnswer is one URL's line: its status (0 for an ERROR line), squid's Via and
// X-Squid-Error headers, or the error.
type httpgetAnswer struct {
	Code          int
	Via, SquidErr string
	Err           string
}

// parseHTTPGet reads httpget's output (cluster/node/httpget):
//
//	proxy URL resolves to ADDR...
//	CODE URL via="..." [squid-error="..."]
//	ERROR URL message
func parseHTTPGet(out string) (httpgetOutput, error) {
	o := httpgetOutput{Answers: map[string]httpgetAnswer{}}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "proxy "); ok {
			u, addrs, ok := strings.Cut(rest, " resolves to ")
			if !ok {
				return o, fmt.Errorf("not httpget's proxy line: %q", line)
			}
			o.Proxy, o.Addrs = u, strings.Fields(addrs)
			continue
		}
		first, rest, _ := strings.Cut(line, " ")
		u, attrs, _ := strings.Cut(rest, " ")
		if u == "" {
			return o, fmt.Errorf("not an httpget line: %q", line)
		}
		if first == "ERROR" {
			o.Answers[u] = httpgetAnswer{Err: attrs}
			continue
		}
		code, err := strconv.Atoi(first)
		if err != nil {
			return o, fmt.Errorf("not an httpget line: %q", line)
		}
		a := httpgetAnswer{Code: code}
		for attrs != "" {
			k, v, ok := strings.Cut(attrs, "=")
			if !ok {
				return o, fmt.Errorf("httpget line %q: %q is no key=\"value\"", line, attrs)
			}
			q, err := strconv.QuotedPrefix(v)
			if err != nil {
				return o, fmt.Errorf("httpget line %q: %w", line, err)
			}
			s, _ := strconv.Unquote(q)
			switch k {
			case "via":
				a.Via = s
			case "squid-error":
				a.SquidErr = s
			}
			attrs = strings.TrimSpace(v[len(q):])
		}
		o.Answers[u] = a
	}
	if o.Proxy == "" {
		return o, errors.New("httpget printed no proxy line")
	}
	return o, nil
}

// check says what in o differs from what pod p must see: the proxy is the Secret's url,
// resolved to the Service's cluster IP; each GET answered its code through squid (a Via
// header), a denial with the rule's page.
func (p appPod) check(o httpgetOutput, secretURL, clusterIP string) []string {
	var bad []string
	if o.Proxy != secretURL {
		bad = append(bad, fmt.Sprintf("the proxy is %q, not the Secret's url %q", o.Proxy, secretURL))
	}
	if !slices.Contains(o.Addrs, clusterIP) {
		bad = append(bad, fmt.Sprintf("the proxy's name resolved to %v, not the Service's cluster IP %s", o.Addrs, clusterIP))
	}
	for _, g := range p.Gets {
		a, ok := o.Answers[g.URL]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("GET %s: no answer printed", g.URL))
		case a.Err != "":
			bad = append(bad, fmt.Sprintf("GET %s: %s", g.URL, a.Err))
		case a.Code != g.Code:
			bad = append(bad, fmt.Sprintf("GET %s: %d, want %d (X-Squid-Error %q)", g.URL, a.Code, g.Code, a.SquidErr))
		case a.Via == "":
			bad = append(bad, fmt.Sprintf("GET %s: %d without a Via header: the answer did not come through squid", g.URL, a.Code))
		case g.Page != "" && !strings.HasPrefix(a.SquidErr, g.Page+" "):
			bad = append(bad, fmt.Sprintf("GET %s: X-Squid-Error %q, want %s", g.URL, a.SquidErr, g.Page))
		case g.Page == "" && a.SquidErr != "":
			bad = append(bad, fmt.Sprintf("GET %s: X-Squid-Error %q, want none", g.URL, a.SquidErr))
		}
	}
	return bad
}

// clientset is a client-go clientset of the node's API server (for pod logs).
func (e *env) clientset() (*kubernetes.Clientset, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", e.cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// runAppPod runs application pod p (any pod of its name is deleted first) until it ends,
// checks what it printed against the Proxy's Secret and Service, and deletes it when it
// passed. A failed pod stays for a look (KEEP_ON_FAILURE) or goes with its namespace.
func (e *env) runAppPod(ctx context.Context, p appPod) error {
	if err := e.deletePod(ctx, p.NS, p.Name); err != nil {
		return err
	}
	text, err := p.manifest(e.cfg.Repo, e.cfg.ClientImage, e.values())
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := e.applyText(ctx, exAppFile, text); err != nil {
		return err
	}
	return e.checkAppPod(ctx, p, t0)
}

// checkAppPod waits until application pod p, created at t0, ends, checks what it printed
// against the Proxy's Secret and Service, and deletes it when it passed.
func (e *env) checkAppPod(ctx context.Context, p appPod, t0 time.Time) error {
	label := p.NS + "/" + p.Name
	cs, err := e.clientset()
	if err != nil {
		return err
	}
	secret := p.Proxy + "-proxy"
	data, err := e.secretData(ctx, p.NS, secret)
	if err != nil {
		return fmt.Errorf("pod %s: %w", label, err)
	}
	svc := &corev1.Service{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: p.NS, Name: secret}, svc); err != nil {
		return fmt.Errorf("pod %s: Service %s/%s: %w", label, p.NS, secret, err)
	}
	pod := &corev1.Pod{}
	if err := waitFor(ctx, "pod "+label+" to end", time.Second, 180*time.Second, func(ctx context.Context) error {
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: p.NS, Name: p.Name}, pod); err != nil {
			return err
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return nil
		}
		return fmt.Errorf("phase %s%s", pod.Status.Phase, waiting(pod))
	}); err != nil {
		return err
	}
	took := secs(time.Since(t0))
	logs, err := cs.CoreV1().Pods(p.NS).GetLogs(p.Name, &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("logs of pod %s: %w", label, err)
	}
	out, err := parseHTTPGet(string(logs))
	if err != nil {
		return fmt.Errorf("pod %s (phase %s): %w; it printed:\n%s", label, pod.Status.Phase, err, indent(string(logs), "    "))
	}
	bad := p.check(out, string(data["url"]), svc.Spec.ClusterIP)
	if pod.Status.Phase != corev1.PodSucceeded {
		bad = append(bad, "the pod ended "+string(pod.Status.Phase))
	}
	if len(bad) > 0 {
		return fmt.Errorf("pod %s through Proxy %s/%s: %s; it printed:\n%s", label, p.NS, p.Proxy, strings.Join(bad, "; "), indent(string(logs), "    "))
	}
	logf("  pod %s (%s): HTTP_PROXY %s from Secret %s/%s, resolved by cluster DNS to the Service's %s; ended %s after %ss:\n%s",
		label, e.cfg.ClientImage, out.Proxy, p.NS, secret, svc.Spec.ClusterIP, pod.Status.Phase, took, indent(strings.TrimSpace(string(logs)), "    "))
	return e.deletePod(ctx, p.NS, p.Name)
}

// waiting is why the pod's container waits, if it does (an image that does not pull, the
// Secret that does not exist yet).
func waiting(pod *corev1.Pod) string {
	for _, s := range pod.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil && w.Reason != "" {
			return fmt.Sprintf(", container %s waiting: %s %s", s.Name, w.Reason, truncate(w.Message, 160))
		}
	}
	return ""
}

// deletePod deletes pod ns/name and waits until it is gone.
func (e *env) deletePod(ctx context.Context, ns, name string) error {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := e.c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil && !kerrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", ns, name, err)
	}
	return waitFor(ctx, "pod "+ns+"/"+name+" to be gone", time.Second, 120*time.Second, func(ctx context.Context) error {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(p), &corev1.Pod{}); !kerrors.IsNotFound(err) {
			return errors.Join(err, errors.New("still there"))
		}
		return nil
	})
}
