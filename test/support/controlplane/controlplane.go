// Package testenv starts a real kube-apiserver and etcd (controller-runtime's envtest, with
// binaries from KUBEBUILDER_ASSETS) with the provider's CRDs installed, and runs controllers
// against it, for integration tests of whole reconcile loops.
//
// Without KUBEBUILDER_ASSETS a test is skipped with a loud reason, except when CI is set:
// then it fails.
package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/feature"
	"github.com/crossplane/crossplane-runtime/v2/pkg/gate"
	"github.com/crossplane/crossplane-runtime/v2/pkg/logging"
	"github.com/crossplane/crossplane-runtime/v2/pkg/ratelimiter"

	"github.com/provider-kvm/provider-kvm/apis"
	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/setup"
	"github.com/provider-kvm/provider-kvm/internal/fairness"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/sourcepolicy"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// Env is a running control plane.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *kruntime.Scheme
	// Workers and RateLimiter, when set, replace Run's defaults (4 workers per controller, a
	// fairness.Limiter of 50 reconciles per second).
	Workers     int
	RateLimiter ratelimiter.RateLimiter
	// ClusterID is this control plane's cluster ID (the provider's --cluster-id), unique per
	// Start: packages that run side by side on the test bed are clusters sharing its host, and
	// leave each other's image owner records and orphans alone. Shared sets it.
	ClusterID string
}

// Shared is the process state of the controllers Run starts (setup.NewShared with the
// platform's settings pl), for this control plane's cluster.
func (e *Env) Shared(pl ...sourcepolicy.Platform) *setup.Shared {
	s := setup.NewShared(pl...)
	s.ClusterID = e.ClusterID
	s.Images = imagecache.NewShared(imagecache.InCluster(e.ClusterID))
	return s
}

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Start starts etcd and kube-apiserver with package/crds installed; they stop when the test
// ends.
func Start(t testing.TB) *Env {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		msg := "INTEGRATION TEST NOT RUN: KUBEBUILDER_ASSETS is not set (kube-apiserver and etcd); run `make test`, which builds them"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctrl.SetLogger(testLogger())
	s := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, apis.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "package", "crds")},
		ErrorIfCRDPathMissing: true,
		Scheme:                s,
	}
	// Inside the test bed's network namespace there is no default route to guess from.
	env.ControlPlane.GetAPIServer().Configure().Set("advertise-address", "127.0.0.1")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("cannot start envtest control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("cannot stop envtest: %v", err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 6)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	return &Env{Config: cfg, Client: c, Scheme: s, ClusterID: "envtest-" + hex.EncodeToString(id)}
}

// Run starts a controller manager with the given controllers until the test ends. Managed
// resources are polled every poll.
func (e *Env) Run(t testing.TB, poll time.Duration, setups ...func(ctrl.Manager, controller.Options) error) {
	t.Helper()
	// Tests of one package run managers one after another in one process: the same controller
	// names come back, which controller-runtime refuses unless told.
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{Scheme: e.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}, Client: setup.ClientOptions()})
	if err != nil {
		t.Fatal(err)
	}
	o := controller.Options{
		Logger:                  logging.NewLogrLogger(testLogger()),
		MaxConcurrentReconciles: 4,
		PollInterval:            poll,
		GlobalRateLimiter:       fairness.NewLimiter(50),
		Features:                &feature.Flags{},
		Gate:                    new(gate.Gate[schema.GroupVersionKind]),
	}
	if e.Workers > 0 {
		o.MaxConcurrentReconciles = e.Workers
	}
	if e.RateLimiter != nil {
		o.GlobalRateLimiter = e.RateLimiter
	}
	o.Features.Enable(feature.EnableBetaManagementPolicies)
	for _, s := range setups {
		if err := s(mgr, o); err != nil {
			t.Fatal(err)
		}
	}
	// Safe-start: the CRDs are installed already, so open the gate for all of them.
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := e.Client.List(context.Background(), crds); err != nil {
		t.Fatal(err)
	}
	for _, crd := range crds.Items {
		for _, v := range crd.Spec.Versions {
			o.Gate.Set(schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}, true)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("controller manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// Namespace creates a namespace if it does not exist.
func (e *Env) Namespace(t testing.TB, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.Client.Create(context.Background(), ns); err != nil && !kerrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// Eventually polls fn until it returns nil, failing the test with fn's last error after
// timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// HostConfig creates a Secret with the test bed's SSH key and known_hosts and a
// ClusterProviderConfig named name that reaches the test bed's libvirtd through its sshd.
func (e *Env) HostConfig(t testing.TB, tb *testbed.Env, name string) {
	t.Helper()
	ctx := context.Background()
	e.Namespace(t, "crossplane-system")
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "crossplane-system", Name: name + "-ssh"},
		Data:       map[string][]byte{"ssh-privatekey": tb.Read(t, tb.KeyFile), "known_hosts": tb.Read(t, tb.KnownHostsFile)},
	}
	if err := e.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	sel := func(key string) v1alpha1.SecretKeySelector {
		return v1alpha1.SecretKeySelector{Namespace: "crossplane-system", Name: name + "-ssh", Key: key}
	}
	cpc := &v1alpha1.ClusterProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ProviderConfigSpec{
		Transport: v1alpha1.TransportSSH, Host: tb.SSHHost, Port: int32(tb.SSHPort), User: tb.SSHUser,
		Credentials:   &v1alpha1.SSHCredentials{SecretRef: sel("ssh-privatekey")},
		KnownHosts:    &v1alpha1.KnownHosts{SecretRef: sel("known_hosts")},
		LibvirtSocket: tb.LibvirtSocket, URI: "qemu:///system",
		Defaults: v1alpha1.HostDefaults{DomainType: v1alpha1.DomainTypeQEMU, Pool: tb.Pool, Network: tb.Net},
	}}
	if err := e.Client.Create(ctx, cpc); err != nil {
		t.Fatal(err)
	}
}

// testLogger is the controllers' logger: silent, or with PKVM_TEST_LOG=1 their debug log on
// stderr (go test -v shows it), to see what a slow or failing case waited on.
func testLogger() logr.Logger {
	if os.Getenv("PKVM_TEST_LOG") == "" {
		return logr.Discard()
	}
	return zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr))
}
