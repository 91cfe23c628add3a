package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/baseimage"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// The namespaces of the full-pool case: one BaseImage each, on the same small pool.
var poolFullNamespaces = []string{nsPrefix + "full-a", nsPrefix + "full-b"}

const (
	// poolFullConfig is the ClusterProviderConfig whose default pool is the small pool.
	poolFullConfig = "full"
	// poolFullQuiet is how long the failed image must not be downloaded again (its retry
	// waits 5 min at least).
	poolFullQuiet = time.Minute
	// poolFullRecover bounds its publish once space is freed: the 5 min wait, a poll, the upload.
	poolFullRecover = 7 * time.Minute
)

// poolFull: two BaseImages of 4 MiB (slow images) published at once into a 6 MiB pool (a
// tmpfs in libvirtd's mount namespace) whose config keeps 1 MiB free. Both pass the free-space
// check; the second to write runs out of space. It must show Ready=False with reason PoolFull
// naming the pool, leave no partial volume, and not be downloaded again for a minute (its next
// attempt waits 5 min, and uploads only into a pool with room). Once the first BaseImage is
// deleted (space freed), the second is published.
func (s *suite) poolFull(t *testing.T) {
	p := s.startProvider(t, "PoolFull", "")
	defer p.Stop()
	pool := s.smallPoolConfig(t, poolFullConfig, 6<<20, 1)
	ctx := context.Background()

	var (
		recovered time.Duration
		notes     []string
		imgs      []string
		bis       []*v1alpha1.BaseImage
	)
	defer func() { s.record(t, recovered, s.smallPoolLeaks(t, pool.Name, imgs), notes...) }()
	ref := &xpv2.ProviderConfigReference{Kind: v1alpha1.ClusterProviderConfigKind, Name: poolFullConfig}
	for _, ns := range poolFullNamespaces {
		img := slowPrefix + ns
		imgs = append(imgs, img)
		bi := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "base"}, Spec: v1alpha1.BaseImageSpec{
			ManagedResourceSpec: xpv2.ManagedResourceSpec{ProviderConfigReference: ref},
			ForProvider: v1alpha1.BaseImageParameters{Format: v1alpha1.ImageFormatRaw,
				Source: v1alpha1.ImageSource{URL: s.images.URL + "/" + img + ".img", SHA256: digest(img)}}}}
		bis = append(bis, bi)
		s.create(t, []resource.Managed{bi})
	}

	// One is published, the other fails with PoolFull.
	var ok, full int
	failedAt := time.Now()
	wait(t, recoverBound, "one BaseImage Ready, the other PoolFull", func() error {
		ok, full = -1, -1
		for i, bi := range bis {
			if err := s.kube.Get(ctx, client.ObjectKeyFromObject(bi), bi); err != nil {
				return err
			}
			switch r := bi.GetCondition(xpv2.TypeReady); {
			case r.Status == corev1.ConditionTrue:
				ok = i
			case r.Reason == baseimage.ReasonPoolFull:
				full = i
			}
		}
		if ok < 0 || full < 0 {
			return fmt.Errorf("not yet: %s", conditions(bis))
		}
		failedAt = time.Now()
		return nil
	})
	msg := bis[full].GetCondition(xpv2.TypeReady).Message
	how := "refused by the free-space check"
	if strings.Contains(msg, "No space left on device") {
		how = "ENOSPC during the upload"
	}
	if !strings.Contains(msg, pool.Name) {
		t.Errorf("the PoolFull message does not name the pool %s: %q", pool.Name, msg)
	}
	notes = append(notes, "second image "+how)
	t.Logf("PoolFull after %s: %s", time.Since(failedAt).Round(time.Second), msg)

	// Not downloaded again, and nothing of it left in the pool, for a minute.
	sent := s.sentOf(imgs[full])
	time.Sleep(poolFullQuiet)
	if now := s.sentOf(imgs[full]); now != sent {
		t.Errorf("the image that did not fit was downloaded again within %s: %d bytes sent, %d before", poolFullQuiet, now, sent)
	}
	if err := s.kube.Get(ctx, client.ObjectKeyFromObject(bis[full]), bis[full]); err != nil {
		t.Fatal(err)
	}
	if r := bis[full].GetCondition(xpv2.TypeReady).Reason; r != baseimage.ReasonPoolFull {
		t.Errorf("after %s the Ready reason is %q, want PoolFull", poolFullQuiet, r)
	}
	if partial := s.smallPoolVolumes(t, pool.Name, digest(imgs[full])); len(partial) > 0 {
		t.Errorf("the failed upload left %v in the pool", partial)
	}
	notes = append(notes, fmt.Sprintf("not downloaded again in %s", poolFullQuiet))

	// Space freed: the first BaseImage goes, the second is published.
	if err := s.kube.Delete(ctx, bis[ok]); err != nil {
		t.Fatal(err)
	}
	wait(t, recoverBound, "the first BaseImage gone", func() error { return s.notGone([]resource.Managed{bis[ok]}) })
	freed := time.Now()
	wait(t, poolFullRecover, "the second BaseImage Ready once space is freed", func() error {
		return s.notReady([]resource.Managed{bis[full]})
	})
	recovered = time.Since(failedAt)
	notes = append(notes, fmt.Sprintf("published %s after space was freed", time.Since(freed).Round(time.Second)))
	if err := s.kube.Delete(ctx, bis[full]); err != nil {
		t.Fatal(err)
	}
	wait(t, recoverBound, "the second BaseImage gone", func() error { return s.notGone([]resource.Managed{bis[full]}) })
}

// conditions sums up the BaseImages' Ready conditions.
func conditions(bis []*v1alpha1.BaseImage) string {
	var out []string
	for _, bi := range bis {
		r := bi.GetCondition(xpv2.TypeReady)
		out = append(out, fmt.Sprintf("%s: %s %s %q", bi.GetNamespace(), r.Status, r.Reason, r.Message))
	}
	return strings.Join(out, "; ")
}

// smallPoolVolumes lists the volumes of pool whose name contains sub.
func (s *suite) smallPoolVolumes(t *testing.T, pool, sub string) []string {
	t.Helper()
	if _, err := virsh("pool-refresh", pool); err != nil {
		t.Error(err)
	}
	out, err := virsh("vol-list", "--pool", pool)
	if err != nil {
		t.Error(err)
		return nil
	}
	var vols []string
	for _, l := range lines(out) {
		if name := strings.Fields(l)[0]; strings.Contains(name, sub) {
			vols = append(vols, name)
		}
	}
	return vols
}

// smallPoolLeaks is what of the images is left in pool, each an error.
func (s *suite) smallPoolLeaks(t *testing.T, pool string, imgs []string) []string {
	t.Helper()
	var left []string
	for _, img := range imgs {
		for _, v := range s.smallPoolVolumes(t, pool, digest(img)) {
			t.Errorf("leaked on the host: volume %s", v)
			left = append(left, "volume "+v)
		}
	}
	return left
}

// smallPoolConfig makes a small pool of size bytes (a tmpfs in libvirtd's mount namespace) and
// the ClusterProviderConfig name with it as its default pool, limits.minFreePoolMiB minFreeMiB
// and the suite's image server allowed.
func (s *suite) smallPoolConfig(t *testing.T, name string, size int, minFreeMiB int64) *testbed.SmallPool {
	t.Helper()
	pool := s.tb.SmallPool(t, size)
	s.env.HostConfig(t, s.tb, name)
	s.env.AllowImageServer(t, name, s.images.URL)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cpc := &v1alpha1.ClusterProviderConfig{}
		if err := s.kube.Get(context.Background(), types.NamespacedName{Name: name}, cpc); err != nil {
			return err
		}
		cpc.Spec.Defaults.Pool, cpc.Spec.Limits.MinFreePoolMiB = pool.Name, minFreeMiB
		return s.kube.Update(context.Background(), cpc)
	})
	if err != nil {
		t.Fatal(err)
	}
	return pool
}
