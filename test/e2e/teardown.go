//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	kerrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// xrsLeft lists the Proxies and ProxyClaims of the namespaces and every XProxy.
func (e *env) xrsLeft(ctx context.Context, namespaces []string) []string {
	var out []string
	for _, gvk := range []schema.GroupVersionKind{gvkProxy, gvkProxyClaim, gvkXProxy} {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if gvk == gvkXProxy { // cluster-scoped
			if e.c.List(ctx, l) == nil {
				out = append(out, names(l)...)
			}
			continue
		}
		for _, ns := range namespaces {
			if e.c.List(ctx, l, client.InNamespace(ns)) == nil {
				out = append(out, names(l)...)
			}
		}
	}
	return out
}

// managedIn: a managed resource of ours is in one of the namespaces.
func (e *env) managedIn(ctx context.Context, namespaces []string) bool {
	left, err := e.managedLeft(ctx, namespaces, kvmDomains, seedVolumes, baseImages)
	return err != nil || len(left) > 0
}

// teardown deletes the Proxies, claims and then the BaseImages of the namespaces through
// Kubernetes, waits up to mrTimeout for the managed resources to go and up to hostTimeout for
// the host to hold nothing of them (and no base volume but those in keep).
func (e *env) teardown(ctx context.Context, namespaces []string, keep map[string]bool, mrTimeout, hostTimeout time.Duration) error {
	if !apiReady(ctx, e.c) {
		logf("the API server does not answer: skipping the deletion through Kubernetes")
		return nil
	}
	if !e.providerAlive(ctx) {
		logf("the provider does not answer: skipping the deletion through Kubernetes")
		return nil
	}
	logf("deleting the Proxies, claims and BaseImages of %s through Kubernetes", strings.Join(namespaces, ", "))
	for _, ns := range namespaces {
		for _, gvk := range []schema.GroupVersionKind{gvkProxyClaim, gvkProxy} {
			if err := e.c.DeleteAllOf(ctx, newUnstructured(gvk, "", ""), client.InNamespace(ns)); err != nil && !kerrors.IsNotFound(err) {
				logf("  deleting the %ss of %s: %v", gvk.Kind, ns, err)
			}
		}
	}
	var errs []error
	if err := waitFor(ctx, "their managed resources to be deleted", 2*time.Second, mrTimeout, func(ctx context.Context) error {
		left, err := e.managedLeft(ctx, namespaces, kvmDomains, seedVolumes)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("left: %s", strings.Join(left, ", "))
		}
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	for _, ns := range namespaces {
		if err := e.c.DeleteAllOf(ctx, &v1alpha1.BaseImage{}, client.InNamespace(ns)); err != nil && !kerrors.IsNotFound(err) {
			logf("  deleting the BaseImages of %s: %v", ns, err)
		}
	}
	if err := waitFor(ctx, "the test bed to hold nothing of "+strings.Join(namespaces, ", "), 2*time.Second, hostTimeout, func(context.Context) error {
		left, err := e.hosts.Leftovers(namespaces, keep)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("left: %s", objectList(left))
		}
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// teardownRun is e2ectl teardown (make demo-down): delete through Kubernetes and wait.
func teardownRun(cfg config, namespaces []string) int {
	ctx := context.Background()
	e, err := newEnv(cfg)
	if err != nil {
		warnf("%v", err)
		return 1
	}
	defer e.hosts.Close()
	keep := map[string]bool{}
	if err := e.teardown(ctx, namespaces, keep, e.cfg.DeleteTimeout, 300*time.Second); err != nil {
		warnf("%v", err)
		return 1
	}
	return 0
}
