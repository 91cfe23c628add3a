//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// untrustedCAMessage is what a download from a server whose CA the provider does not trust
// must say (Go's x509.UnknownAuthorityError).
const untrustedCAMessage = "certificate signed by unknown authority"

// checkHTTPSImages: team-c's BaseImage debian-12-squid (cluster/e2e/manifests/teams.yaml) is
// Ready from its https:// URL, served with a certificate of the CA that reached the provider
// only through its DeploymentRuntimeConfig (cluster/node/packages.sh: ConfigMap
// provider-kvm-ca under SSL_CERT_DIR); BaseImage team-b/untrusted-ca, the same image from the
// server of a CA the provider was never given, is not Ready and its condition names the
// certificate problem. It is team-b's because team-b has no bytes of the image on host A (a
// team's own bytes attach without a download), and it is deleted once it said so, before
// team-b's second replica caches the image there. Nothing boots for either: the first is the
// claim's image already.
func (e *env) checkHTTPSImages(ctx context.Context) error {
	vals := e.values()
	bi := &v1alpha1.BaseImage{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "team-c", Name: "debian-12-squid"}, bi); err != nil {
		return err
	}
	if u := bi.Spec.ForProvider.Source.URL; u != vals["IMAGE_URL_B"] || !strings.HasPrefix(u, "https://") {
		return fmt.Errorf("BaseImage team-c/debian-12-squid has URL %q, want %s", u, vals["IMAGE_URL_B"])
	}
	if err := conditionTrue("BaseImage", "team-c/debian-12-squid", bi.GetCondition(xpv2.TypeReady)); err != nil {
		return err
	}
	logf("  BaseImage team-c/debian-12-squid Ready from %s: the provider trusted the CA its DeploymentRuntimeConfig mounted (ConfigMap crossplane-system/provider-kvm-ca, SSL_CERT_DIR)", bi.Spec.ForProvider.Source.URL)
	var msg string
	if err := waitFor(ctx, "BaseImage team-b/untrusted-ca to fail on the server's certificate", 2*time.Second, 180*time.Second, func(ctx context.Context) error {
		u := &v1alpha1.BaseImage{}
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "untrusted-ca"}, u); err != nil {
			return err
		}
		if u.GetCondition(xpv2.TypeReady).Status == corev1.ConditionTrue {
			return fmt.Errorf("it is Ready: the provider downloaded from %s, whose CA it was never given", u.Spec.ForProvider.Source.URL)
		}
		for _, t := range []xpv2.ConditionType{xpv2.TypeSynced, xpv2.TypeReady} {
			if c := u.GetCondition(t); c.Status == corev1.ConditionFalse && strings.Contains(c.Message, untrustedCAMessage) {
				msg = fmt.Sprintf("%s=False %s: %s", t, c.Reason, c.Message)
				return nil
			}
		}
		return fmt.Errorf("no condition says %q yet (Synced: %s, Ready: %s)", untrustedCAMessage,
			truncate(u.GetCondition(xpv2.TypeSynced).Message, 200), truncate(u.GetCondition(xpv2.TypeReady).Message, 200))
	}); err != nil {
		return err
	}
	logf("  BaseImage team-b/untrusted-ca (%s, a CA the provider was never given): %s", vals["IMAGE_URL_UNTRUSTED"], msg)
	u := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "untrusted-ca"}}
	if err := e.c.Delete(ctx, u); err != nil {
		return fmt.Errorf("deleting BaseImage team-b/untrusted-ca: %w", err)
	}
	return waitFor(ctx, "BaseImage team-b/untrusted-ca to be gone", 2*time.Second, 2*time.Minute, func(ctx context.Context) error {
		err := e.c.Get(ctx, client.ObjectKeyFromObject(u), u)
		if kerrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there (deletion %v)", u.GetDeletionTimestamp())
	})
}
