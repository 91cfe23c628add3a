//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	xpextv1 "github.com/crossplane/crossplane/apis/v2/apiextensions/v1"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
	pkgv1 "github.com/crossplane/crossplane/apis/v2/pkg/v1"

	"github.com/provider-kvm/provider-kvm/apis"
)

// The Proxy API (package/configuration) has no Go types: its XRs and claims are unstructured.
var (
	gvkProxy      = schema.GroupVersionKind{Group: "platform.kvm.crossplane.io", Version: "v1alpha1", Kind: "Proxy"}
	gvkProxyClaim = schema.GroupVersionKind{Group: "platform.kvm.crossplane.io", Version: "v1alpha1", Kind: "ProxyClaim"}
	gvkXProxy     = schema.GroupVersionKind{Group: "platform.kvm.crossplane.io", Version: "v1alpha1", Kind: "XProxy"}
)

// Function names as the Compositions refer to them (package/configuration/crossplane.yaml).
const (
	fnProxy     = "provider-kvm-function-kvm-proxy"
	fnAutoReady = "crossplane-contrib-function-auto-ready"
	fieldOwner  = "provider-kvm-e2e"
)

// newClient is a controller-runtime client for the control plane of E2E_WORK, with the Go
// types of Kubernetes, the provider (apis/v1alpha1) and Crossplane's packages and XRDs.
func newClient(cfg config) (client.Client, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", cfg.Kubeconfig, err)
	}
	rc.QPS, rc.Burst = 50, 100
	rc.Timeout = 30 * time.Second
	s := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, apis.AddToScheme, pkgv1.AddToScheme, xpextv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return client.New(rc, client.Options{Scheme: s})
}

// apiReady: the API server answers /readyz.
func apiReady(ctx context.Context, c client.Client) bool {
	ns := &corev1.NamespaceList{}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.List(ctx, ns, client.Limit(1)) == nil
}

// ------------------------------------------------------------------ manifests

var placeholder = regexp.MustCompile(`@([A-Z0-9_]+)@`)

// render replaces every @KEY@ of a manifest by vals[KEY]; a key without a value is an error.
func render(text string, vals map[string]string) (string, error) {
	var missing []string
	out := placeholder.ReplaceAllStringFunc(text, func(m string) string {
		k := m[1 : len(m)-1]
		v, ok := vals[k]
		if !ok || v == "" {
			missing = append(missing, k)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("no value for %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// objects renders cluster/e2e/manifests/FILE and decodes its documents.
func (e *env) objects(file string, vals map[string]string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(filepath.Join(e.cfg.Manifests, file))
	if err != nil {
		return nil, err
	}
	text, err := render(string(b), vals)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", file, err)
	}
	return decode(file, text)
}

// decode reads the YAML documents of text (from file) as objects.
func decode(file, text string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	r := k8syaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// apply renders a manifest and applies each of its objects (server-side apply).
func (e *env) apply(ctx context.Context, file string, vals map[string]string) error {
	objs, err := e.objects(file, vals)
	if err != nil {
		return err
	}
	return e.applyObjects(ctx, file, objs)
}

// applyText applies the objects of text, read from file.
func (e *env) applyText(ctx context.Context, file, text string) error {
	objs, err := decode(file, text)
	if err != nil {
		return err
	}
	return e.applyObjects(ctx, file, objs)
}

func (e *env) applyObjects(ctx context.Context, file string, objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		if err := e.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s from %s: %w", u.GetKind(), u.GetName(), file, err)
		}
	}
	return nil
}

// values are the manifests' placeholders.
func (e *env) values() map[string]string {
	a, b := e.cfg.hostNames()
	base := filepath.Base(e.cfg.Image)
	img := func(dir string) string {
		return fmt.Sprintf("http://%s/%s/%s", net.JoinHostPort(e.cfg.ImageHost, fmt.Sprint(e.cfg.ImagePort)), dir, base)
	}
	imgTLS := func(port int, dir string) string {
		return fmt.Sprintf("https://%s/%s/%s", net.JoinHostPort(e.cfg.ImageHost, fmt.Sprint(port)), dir, base)
	}
	return map[string]string{
		"IMAGE_PORT":           fmt.Sprint(e.cfg.ImagePort),
		"IMAGE_TLS_PORT":       fmt.Sprint(e.cfg.ImageTLSPort),
		"IMAGE_UNTRUSTED_PORT": fmt.Sprint(e.cfg.ImageUntrustedPort),
		"IMAGE_HOST":           e.cfg.ImageHost,
		"IMAGE_SHA256":         e.imageSHA256,
		"IMAGE_URL_A":          img("a"),
		// team-c's BaseImage, over HTTPS from the server whose CA the provider's pod trusts
		// through its DeploymentRuntimeConfig; IMAGE_URL_UNTRUSTED the same image from the
		// server of a CA it does not trust.
		"IMAGE_URL_B":         imgTLS(e.cfg.ImageTLSPort, "b"),
		"IMAGE_URL_UNTRUSTED": imgTLS(e.cfg.ImageUntrustedPort, "b"),
		"IMAGE_URL_DEMO":      img("demo"),
		"PROBE_URL":           e.probeURL,
		// The examples' allowedDomains, their probe's origin in place of the example's.
		"ALLOWED_DOMAINS": "allowedDomains: [.debian.org, " + e.originIP + "]",
		"VCPUS":           fmt.Sprint(e.cfg.VCPUs),
		"MEM_MIB":         fmt.Sprint(e.cfg.MemMiB),
		"IMAGE_URL_C":     img("c"),
		"SSH_USER":        e.cfg.SSHUser,
		"LIBVIRT_SOCKET":  e.cfg.LibvirtSocket,
		"LIBVIRT_URI":     e.cfg.LibvirtURI,
		"HOST_A":          a,
		"HOST_B":          b,
		"GUEST_CIDR":      e.guestCIDR,
	}
}

// hostValues are the values of clusterproviderconfig.yaml for one host.
func hostValues(vals map[string]string, h hostConfig) map[string]string {
	v := maps.Clone(vals)
	v["PC_NAME"], v["SSH_HOST"], v["SSH_PORT"], v["POOL"], v["ATTACHMENT"] = h.Name, h.SSHHost, fmt.Sprint(h.SSHPort), h.Pool, h.attachment()
	return v
}

// ------------------------------------------------------------------ waiting

// waitFor polls check every interval until it returns nil, for at most timeout, and says so
// every minute; the error names what was waited for and the last reason check gave.
func waitFor(ctx context.Context, what string, interval, timeout time.Duration, check func(context.Context) error) error {
	start, next := time.Now(), time.Minute
	var last error
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		if last = check(ctx); last == nil {
			return true, nil
		}
		if el := time.Since(start); el >= next {
			logf("  still waiting for %s (%.0fs): %v", what, el.Seconds(), last)
			next += time.Minute
		}
		return false, nil
	})
	if err == nil {
		return nil
	}
	if last == nil {
		last = err
	}
	return fmt.Errorf("timed out after %s waiting for %s: %v", timeout, what, last)
}

// conditionTrue is nil when the condition is True, else an error with its reason.
func conditionTrue(kind, name string, c xpv2.Condition) error {
	if c.Status == corev1.ConditionTrue {
		return nil
	}
	if c.Status == "" {
		return fmt.Errorf("%s %s has no %s condition yet", kind, name, c.Type)
	}
	return fmt.Errorf("%s %s: %s=%s %s: %s", kind, name, c.Type, c.Status, c.Reason, c.Message)
}

// unstructuredCondition returns the condition of type ct of an unstructured object.
func unstructuredCondition(u *unstructured.Unstructured, ct xpv2.ConditionType) xpv2.Condition {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != string(ct) {
			continue
		}
		s := func(k string) string { v, _ := m[k].(string); return v }
		return xpv2.Condition{Type: ct, Status: corev1.ConditionStatus(s("status")), Reason: xpv2.ConditionReason(s("reason")), Message: s("message")}
	}
	return xpv2.Condition{Type: ct}
}

func newUnstructured(gvk schema.GroupVersionKind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// ------------------------------------------------------------------ installation

// install does through the API what Crossplane's package runtime would do in a cluster
// (docs/e2e.md, "What is done by hand"), installs the provider and configuration packages
// from the loopback registry and configures the test bed as ClusterProviderConfig default.
// Everything is applied, so running it against a control plane that has it already is fine.
func (e *env) install(ctx context.Context) error {
	t0 := time.Now()
	vals := e.values()
	if err := e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "crossplane-system"}}); err != nil && !kerrors.IsAlreadyExists(err) {
		return err
	}

	// cluster/node/packages.sh installed the packages before the test, or only the platform's
	// part (make e2e): then the README's quickstart installs them now. The package runtime
	// runs the provider and both functions as pods.
	if e.installPackages != nil {
		if err := e.installPackages(ctx); err != nil {
			return err
		}
	}
	rev, err := e.packagesAsPods(ctx)
	if err != nil {
		return err
	}
	for _, p := range []string{"baseimages", "seedvolumes", "kvmdomains", "providerconfigs", "clusterproviderconfigs", "providerconfigusages"} {
		name := p + ".kvm.crossplane.io"
		if err := waitFor(ctx, "CRD "+name+" Established", 2*time.Second, 300*time.Second, func(ctx context.Context) error {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := e.c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				if kerrors.IsNotFound(err) {
					return errors.New("not created (ManagedResourceDefinition not activated? see its status)")
				}
				return err
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return errors.New("not Established")
		}); err != nil {
			return err
		}
	}
	logf("provider package installed: ProviderRevision %s healthy, managed resource CRDs established", rev)

	// The Configuration is configuration-kvm-proxy (packages.sh) or, installed by the README's
	// quickstart, provider-kvm-configuration-kvm-proxy (the CLI's name): its current revision.
	if err := waitFor(ctx, "the Configuration's current revision healthy", 2*time.Second, 300*time.Second, func(ctx context.Context) error {
		l := &pkgv1.ConfigurationList{}
		if err := e.c.List(ctx, l); err != nil {
			return err
		}
		if len(l.Items) != 1 {
			return fmt.Errorf("%d Configurations, want one", len(l.Items))
		}
		cur := l.Items[0].Status.CurrentRevision
		if cur == "" {
			return fmt.Errorf("Configuration %s has no revision yet", l.Items[0].Name)
		}
		r := &pkgv1.ConfigurationRevision{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: cur}, r); err != nil {
			return err
		}
		return conditionTrue("ConfigurationRevision", cur, r.GetCondition(pkgv1.TypeRevisionHealthy))
	}); err != nil {
		return err
	}
	for _, p := range []string{"proxies", "xproxies"} {
		name := p + ".platform.kvm.crossplane.io"
		if err := waitFor(ctx, "XRD "+name+" Established", 2*time.Second, 300*time.Second, func(ctx context.Context) error {
			xrd := &xpextv1.CompositeResourceDefinition{}
			if err := e.c.Get(ctx, client.ObjectKey{Name: name}, xrd); err != nil {
				return err
			}
			return conditionTrue("XRD", name, xrd.GetCondition(xpextv1.TypeEstablished))
		}); err != nil {
			return err
		}
		if err := e.c.Get(ctx, client.ObjectKey{Name: name}, &xpextv1.Composition{}); err != nil {
			return fmt.Errorf("Composition %s: %w", name, err)
		}
	}
	if err := waitFor(ctx, "XRD xproxies.platform.kvm.crossplane.io to offer its claim", 2*time.Second, 120*time.Second, func(ctx context.Context) error {
		xrd := &xpextv1.CompositeResourceDefinition{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: "xproxies.platform.kvm.crossplane.io"}, xrd); err != nil {
			return err
		}
		return conditionTrue("XRD", xrd.Name, xrd.GetCondition(xpextv1.TypeOffered))
	}); err != nil {
		return err
	}
	logf("configuration package installed: XRDs Established (ProxyClaim offered), Compositions present (%ss)", secs(time.Since(t0)))

	// Each host's sshd/libvirtd as a ClusterProviderConfig: the SSH key and the pinned
	// known_hosts (every host's key) in one Secret; TCG guests (domainType qemu), the host's
	// pool and its bridge.
	key, err := os.ReadFile(e.cfg.SSHKey)
	if err != nil {
		return fmt.Errorf("the hosts' SSH key (LAN_SSH_KEY): %w", err)
	}
	kh, err := os.ReadFile(e.cfg.KnownHosts)
	if err != nil {
		return fmt.Errorf("the hosts' known_hosts (LAN_SSH_KNOWN_HOSTS): %w", err)
	}
	if err := e.ensureSecret(ctx, "crossplane-system", "testbed-ssh", map[string][]byte{"ssh-privatekey": key, "known_hosts": kh}); err != nil {
		return err
	}
	for _, h := range e.cfg.Hosts {
		if e.installHost != nil {
			done, err := e.installHost(ctx, h)
			if err != nil {
				return err
			}
			if done {
				continue
			}
		}
		if err := e.apply(ctx, "clusterproviderconfig.yaml", hostValues(vals, h)); err != nil {
			return err
		}
		logf("ClusterProviderConfig %s: ssh %s@%s:%d (pinned host key), domainType qemu, pool %s, %s", h.Name, e.cfg.SSHUser, h.SSHHost, h.SSHPort, h.Pool, h.attachment())
	}
	return nil
}

// revisionHealthy waits until the package revision name (a ProviderRevision or a
// FunctionRevision, per rev's type) is RevisionHealthy.
func (e *env) revisionHealthy(ctx context.Context, rev interface {
	client.Object
	GetCondition(xpv2.ConditionType) xpv2.Condition
}, name string) error {
	kind := strings.TrimPrefix(fmt.Sprintf("%T", rev), "*v1.")
	return waitFor(ctx, kind+" "+name+" RevisionHealthy", 2*time.Second, 300*time.Second, func(ctx context.Context) error {
		if err := e.c.Get(ctx, client.ObjectKey{Name: name}, rev); err != nil {
			return err
		}
		return conditionTrue(kind, name, rev.GetCondition(pkgv1.TypeRevisionHealthy))
	})
}

// packagesAsPods checks what cluster/node/packages.sh installed, as the package runtime runs
// it: the Provider's and both Functions' current revisions are healthy, each has a Running pod,
// and the provider's pod runs as user 2000 without privilege escalation (packages.sh also read
// the process's own uid, NoNewPrivs and capabilities on the node). It returns the provider's
// revision.
func (e *env) packagesAsPods(ctx context.Context) (string, error) {
	p := &pkgv1.Provider{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: "provider-kvm"}, p); err != nil {
		return "", fmt.Errorf("Provider provider-kvm (cluster/node/packages.sh installs it): %w", err)
	}
	rev := p.Status.CurrentRevision
	if err := e.revisionHealthy(ctx, &pkgv1.ProviderRevision{}, rev); err != nil {
		return "", err
	}
	pod, err := e.revisionPod(ctx, "pkg.crossplane.io/revision", rev)
	if err != nil {
		return "", err
	}
	var c *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == "package-runtime" {
			c = &pod.Spec.Containers[i]
		}
	}
	switch sc := podSecurity(pod, c); {
	case c == nil:
		return "", fmt.Errorf("provider pod %s has no container package-runtime", pod.Name)
	case sc.user != 2000 || sc.escalation || sc.privileged:
		return "", fmt.Errorf("provider pod %s: runAsUser %d, allowPrivilegeEscalation %v, privileged %v: want 2000, false, false", pod.Name, sc.user, sc.escalation, sc.privileged)
	}
	// Bound to the RBAC manager's ClusterRole of the revision, and to nothing else.
	crbs := &rbacv1.ClusterRoleBindingList{}
	if err := e.c.List(ctx, crbs); err != nil {
		return "", err
	}
	var roles []string
	for _, b := range crbs.Items {
		for _, s := range b.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Namespace == "crossplane-system" && s.Name == pod.Spec.ServiceAccountName {
				roles = append(roles, b.RoleRef.Name)
			}
		}
	}
	if want := "crossplane:provider:" + rev + ":system"; len(roles) != 1 || roles[0] != want {
		return "", fmt.Errorf("provider ServiceAccount %s is bound to %v, want %s alone (the RBAC manager's)", pod.Spec.ServiceAccountName, roles, want)
	}
	// The kernel's view of the provider's process, whatever the pod spec says.
	cid := ""
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == "package-runtime" {
			_, cid, _ = strings.Cut(s.ContainerID, "://")
		}
	}
	st, err := containerProcess("/proc", cid)
	if err != nil {
		return "", fmt.Errorf("provider pod %s: %w", pod.Name, err)
	}
	if bad := st.unprivileged(2000); bad != "" {
		return "", fmt.Errorf("provider process %d (pod %s): %s; want uid 2000, NoNewPrivs 1, no effective capabilities", st.PID, pod.Name, bad)
	}
	logf("provider revision %s healthy; pod %s (ServiceAccount %s, bound to %s) Running as user 2000, no privilege escalation; its process %d: Uid %s, NoNewPrivs 1, CapEff %s", rev, pod.Name, pod.Spec.ServiceAccountName, roles[0], st.PID, st.UIDs, st.CapEff)
	for _, fn := range []string{fnProxy, fnAutoReady} {
		f := &pkgv1.Function{}
		if err := e.c.Get(ctx, client.ObjectKey{Name: fn}, f); err != nil {
			return "", fmt.Errorf("Function %s: %w", fn, err)
		}
		if err := e.revisionHealthy(ctx, &pkgv1.FunctionRevision{}, f.Status.CurrentRevision); err != nil {
			return "", err
		}
		pod, err := e.revisionPod(ctx, "pkg.crossplane.io/revision", f.Status.CurrentRevision)
		if err != nil {
			return "", err
		}
		logf("function revision %s healthy; pod %s Running", f.Status.CurrentRevision, pod.Name)
	}
	return rev, nil
}

// revisionPod waits for a Running pod in crossplane-system with the label key=value.
func (e *env) revisionPod(ctx context.Context, key, value string) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := waitFor(ctx, "a Running pod of "+value, time.Second, 240*time.Second, func(ctx context.Context) error {
		l := &corev1.PodList{}
		if err := e.c.List(ctx, l, client.InNamespace("crossplane-system"), client.MatchingLabels{key: value}); err != nil {
			return err
		}
		for i := range l.Items {
			if l.Items[i].Status.Phase == corev1.PodRunning {
				pod = &l.Items[i]
				return nil
			}
		}
		return fmt.Errorf("%d pods, none Running", len(l.Items))
	})
	return pod, err
}

// security is what a container's effective security context says.
type security struct {
	user                   int64
	escalation, privileged bool
}

// podSecurity is c's security context over its pod's (the container's fields win); an unset
// allowPrivilegeEscalation counts as allowed, as it is for a container without no_new_privs.
func podSecurity(pod *corev1.Pod, c *corev1.Container) security {
	s := security{user: -1, escalation: true}
	if psc := pod.Spec.SecurityContext; psc != nil && psc.RunAsUser != nil {
		s.user = *psc.RunAsUser
	}
	if c == nil || c.SecurityContext == nil {
		return s
	}
	if c.SecurityContext.RunAsUser != nil {
		s.user = *c.SecurityContext.RunAsUser
	}
	if c.SecurityContext.AllowPrivilegeEscalation != nil {
		s.escalation = *c.SecurityContext.AllowPrivilegeEscalation
	}
	if c.SecurityContext.Privileged != nil {
		s.privileged = *c.SecurityContext.Privileged
	}
	return s
}

// ensureSecret creates the Secret or updates its data.
func (e *env) ensureSecret(ctx context.Context, ns, name string, data map[string][]byte) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	err := e.c.Create(ctx, s)
	if kerrors.IsAlreadyExists(err) {
		cur := &corev1.Secret{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cur); err != nil {
			return err
		}
		cur.Data = data
		err = e.c.Update(ctx, cur)
	}
	if err != nil {
		return fmt.Errorf("Secret %s/%s: %w", ns, name, err)
	}
	return nil
}

// secretData is the Secret's data, or an error saying it is missing.
func (e *env) secretData(ctx context.Context, ns, name string) (map[string][]byte, error) {
	s := &corev1.Secret{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w", ns, name, err)
	}
	return s.Data, nil
}

// providerAlive: the Provider is Healthy with a Ready pod; without it, deleting through
// Kubernetes would wait on finalizers forever.
func (e *env) providerAlive(ctx context.Context) bool {
	_, err := e.providerPod(ctx)
	return err == nil
}

// providerPod is the Ready pod of the Provider's current revision.
func (e *env) providerPod(ctx context.Context) (*corev1.Pod, error) {
	p := &pkgv1.Provider{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: "provider-kvm"}, p); err != nil {
		return nil, fmt.Errorf("Provider provider-kvm: %w", err)
	}
	if p.GetCondition(pkgv1.TypeHealthy).Status != corev1.ConditionTrue {
		return nil, errors.New("Provider provider-kvm is not Healthy")
	}
	l := &corev1.PodList{}
	if err := e.c.List(ctx, l, client.InNamespace("crossplane-system"), client.MatchingLabels{"pkg.crossplane.io/revision": p.Status.CurrentRevision}); err != nil {
		return nil, fmt.Errorf("the provider's pods: %w", err)
	}
	for i := range l.Items {
		for _, c := range l.Items[i].Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return &l.Items[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no Ready pod of provider revision %s", p.Status.CurrentRevision)
}

// ------------------------------------------------------------------ environment

// env is a test's view of the running control plane and the test bed.
type env struct {
	cfg         config
	c           client.Client
	hosts       hosts
	imageSHA256 string
	originIP    string // where the 204 origin listens (the guests reach it there)
	guestCIDR   string // the guests' network
	probeURL    string
	tl          *timeline
	// qs is the README quickstart's session when the test runs it (TestE2E).
	qs *qsSession
	// installPackages, when set, installs the packages if they are not (the README
	// quickstart's steps 1 and 2: make e2e's bring-up leaves it to the test); installHost, when
	// set, makes host h's config otherwise than from the manifest and says whether it did (the
	// quickstart's step 3). The tests set both (requireEnv).
	installPackages func(ctx context.Context) error
	installHost     func(ctx context.Context, h hostConfig) (bool, error)
}

// newEnv connects to the control plane and the test bed.
func newEnv(cfg config) (*env, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	hs, err := dialHosts(cfg)
	if err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, c: c, hosts: hs, tl: &timeline{}}
	if e.originIP, e.guestCIDR, err = origin(cfg); err != nil {
		hs.Close()
		return nil, err
	}
	e.probeURL = fmt.Sprintf("http://%s/", net.JoinHostPort(e.originIP, fmt.Sprint(cfg.OriginPort)))
	if b, err := os.ReadFile(cfg.Image + ".sha256"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			e.imageSHA256 = f[0]
		}
	}
	return e, nil
}

// origin is where the 204 origin listens and the guests' network: node's LAN address and the
// LAN.
func origin(cfg config) (ip, cidr string, err error) {
	if cfg.OriginIP == "" || cfg.GuestCIDR == "" {
		return "", "", errors.New("the configuration names no LAN (LAN_NODE_IP, LAN_SUBNET)")
	}
	return cfg.OriginIP, cfg.GuestCIDR, nil
}

// insideNetns: this process is inside network namespace name.
func insideNetns(name string) bool {
	var self, ns syscall.Stat_t
	if syscall.Stat("/proc/self/ns/net", &self) != nil || syscall.Stat("/run/netns/"+name, &ns) != nil {
		return false
	}
	return self.Dev == ns.Dev && self.Ino == ns.Ino
}

// tail returns the last n lines of a file ("" when it cannot be read).
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sortedKeys of a map, for stable output.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// indent prefixes every line.
func indent(s, prefix string) string {
	var b bytes.Buffer
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + l + "\n")
	}
	return b.String()
}
