//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// conditioned is a managed resource as the diagnostics show it.
type conditioned interface {
	client.Object
	GetCondition(xpv2.ConditionType) xpv2.Condition
}

// diagnose prints, to stderr: the Proxies, claims and XProxies and the managed resources with
// their conditions, recent warning events, the errors in the logs of the provider, the core
// and the functions, and the tail of each guest's serial console.
func (e *env) diagnose(ctx context.Context, namespaces []string) {
	w := os.Stderr
	fmt.Fprintf(w, "----- diagnostics (logs in %s)\n", e.cfg.Logs)
	if e.c != nil && apiReady(ctx, e.c) {
		for _, gvk := range []schema.GroupVersionKind{gvkProxy, gvkProxyClaim, gvkXProxy} {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			if e.c.List(ctx, l) != nil {
				continue
			}
			for i := range l.Items {
				u := &l.Items[i]
				phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
				url, _, _ := unstructured.NestedString(u.Object, "status", "url")
				fmt.Fprintf(w, "  %s %s: phase=%s url=%s\n", gvk.Kind, joinNS(u.GetNamespace(), u.GetName()), orDefault(phase, "-"), orDefault(url, "-"))
				conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
				for _, c := range conds {
					if m, ok := c.(map[string]any); ok {
						str := func(k string) string { v, _ := m[k].(string); return v }
						fmt.Fprintf(w, "    %s=%s %s: %s\n", str("type"), str("status"), str("reason"), truncate(str("message"), 400))
					}
				}
			}
		}
		var mrs []conditioned
		for _, l := range []client.ObjectList{&v1alpha1.KVMDomainList{}, &v1alpha1.SeedVolumeList{}, &v1alpha1.BaseImageList{}} {
			if e.c.List(ctx, l) != nil {
				continue
			}
			switch l := l.(type) {
			case *v1alpha1.KVMDomainList:
				for i := range l.Items {
					mrs = append(mrs, &l.Items[i])
				}
			case *v1alpha1.SeedVolumeList:
				for i := range l.Items {
					mrs = append(mrs, &l.Items[i])
				}
			case *v1alpha1.BaseImageList:
				for i := range l.Items {
					mrs = append(mrs, &l.Items[i])
				}
			}
		}
		for _, mr := range mrs {
			kind := strings.TrimPrefix(fmt.Sprintf("%T", mr), "*v1alpha1.")
			fmt.Fprintf(w, "  %s %s/%s:\n", kind, mr.GetNamespace(), mr.GetName())
			for _, ct := range []xpv2.ConditionType{xpv2.TypeReady, xpv2.TypeSynced} {
				if c := mr.GetCondition(ct); c.Status != "" {
					fmt.Fprintf(w, "    %s=%s %s: %s\n", c.Type, c.Status, c.Reason, truncate(c.Message, 400))
				}
			}
		}
		printWarnings(ctx, w, e.c)
	} else {
		fmt.Fprintln(w, "  (the API server does not answer)")
	}
	if err := e.podLogs(ctx); err != nil {
		fmt.Fprintf(w, "  (the pods' logs: %v)\n", err)
	}
	for _, name := range []string{"provider", "crossplane", "function-kvm-proxy", "function-auto-ready", "http-servers"} {
		printErrors(w, filepath.Join(e.cfg.Logs, name+".log"))
	}
	for _, h := range e.hosts {
		ds, err := h.Domains()
		if err != nil {
			continue
		}
		for _, d := range sortedKeys(ds) {
			ours := false
			for _, ns := range append([]string{"demo"}, namespaces...) {
				ours = ours || strings.HasPrefix(d, ns+"_")
			}
			f := filepath.Join(h.LogDir, "qemu", d+"-console.log")
			if !ours {
				continue
			}
			if s := tail(f, 25); s != "" {
				fmt.Fprintf(w, "----- serial console of %s on %s (%s)\n%s\n", d, h.Name, f, s)
			}
		}
	}
}

// podLogs writes the logs of the provider's, the functions' and the core's pods to
// cfg.Logs/NAME.log (the kubelet serves them through the API server).
func (e *env) podLogs(ctx context.Context) error {
	rc, err := clientcmd.BuildConfigFromFlags("", e.cfg.Kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	var errs []string
	for _, l := range []struct{ name, selector string }{
		{"provider", "pkg.crossplane.io/provider=provider-kvm"},
		{"function-kvm-proxy", "pkg.crossplane.io/function=" + fnProxy},
		{"function-auto-ready", "pkg.crossplane.io/function=" + fnAutoReady},
		{"crossplane", "app=crossplane"},
	} {
		pods, err := cs.CoreV1().Pods("crossplane-system").List(ctx, metav1.ListOptions{LabelSelector: l.selector})
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		var out []byte
		for _, p := range pods.Items {
			b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				errs = append(errs, fmt.Sprintf("logs of pod %s: %v", p.Name, err))
				continue
			}
			out = append(out, b...)
		}
		if err := os.WriteFile(filepath.Join(e.cfg.Logs, l.name+".log"), out, 0o600); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// printWarnings prints the last 15 events that are not Normal.
func printWarnings(ctx context.Context, w io.Writer, c client.Client) {
	evs := &corev1.EventList{}
	if c.List(ctx, evs) != nil {
		return
	}
	var warn []corev1.Event
	for _, ev := range evs.Items {
		if ev.Type != corev1.EventTypeNormal {
			warn = append(warn, ev)
		}
	}
	last := func(ev corev1.Event) int64 {
		if !ev.LastTimestamp.IsZero() {
			return ev.LastTimestamp.UnixNano()
		}
		if !ev.EventTime.IsZero() {
			return ev.EventTime.UnixNano()
		}
		return ev.CreationTimestamp.UnixNano()
	}
	sort.SliceStable(warn, func(i, j int) bool { return last(warn[i]) < last(warn[j]) })
	if len(warn) > 15 {
		warn = warn[len(warn)-15:]
	}
	if len(warn) > 0 {
		fmt.Fprintln(w, "----- recent warning events")
	}
	for _, ev := range warn {
		fmt.Fprintf(w, "  %s %s %s/%s %s: %s\n", ev.Type, ev.InvolvedObject.Kind, ev.Namespace, ev.InvolvedObject.Name, ev.Reason, truncate(ev.Message, 300))
	}
}

var (
	errorLine   = regexp.MustCompile(`(?i)error|warn|fail`)
	ignoredLine = regexp.MustCompile(`finalizer name|is deprecated`)
)

// printErrors prints the last 15 lines of a log that mention an error, a warning or a failure.
func printErrors(w io.Writer, path string) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if errorLine.MatchString(l) && !ignoredLine.MatchString(l) {
			lines = append(lines, truncate(l, 400))
		}
	}
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	fmt.Fprintf(w, "----- errors in %s (last 15)\n", path)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// diagnoseRun is e2ectl diagnose: the diagnostics after a bring-up that failed before a test ran.
func diagnoseRun(cfg config, namespaces []string) int {
	e := &env{cfg: cfg, tl: &timeline{}}
	if _, err := os.Stat(cfg.Kubeconfig); err == nil {
		if c, err := newClient(cfg); err == nil {
			e.c = c
		}
	}
	if hs, err := dialHosts(cfg); err == nil {
		e.hosts = hs
		defer hs.Close()
	}
	e.diagnose(context.Background(), namespaces)
	return 0
}
