package baseimage

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/config"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/names"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// qcow2 makes a real qcow2 image of virtual size MiB with some data written, and returns its
// bytes and sha256.
func qcow2(t *testing.T, dir, name string, sizeMiB int) ([]byte, string) {
	t.Helper()
	p := filepath.Join(dir, name)
	raw := p + ".raw"
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i*7 + len(name))
	}
	if err := os.WriteFile(raw, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, p).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v\n%s", err, out)
	}
	if out, err := exec.Command("qemu-img", "resize", p, fmt.Sprintf("%dM", sizeMiB)).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img resize: %v\n%s", err, out)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// Bytes of this run alone (trailing bytes keep it a valid qcow2): its volume, named by its
	// digest, is not one an earlier run left.
	tail := make([]byte, 512)
	_, _ = rand.Read(tail)
	b = append(b, tail...)
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:])
}

// TestBaseImageOnRealHost runs the BaseImage controller against a real API server and the
// real libvirt test bed, with images served from a loopback HTTP server.
func TestBaseImageOnRealHost(t *testing.T) {
	tb := testbed.Require(t)
	env := controlplane.Start(t)
	env.HostConfig(t, tb, "default")
	conns := host.NewConnections()
	t.Cleanup(func() { _ = conns.Close() })
	env.Run(t, 2*time.Second, config.Setup, func(m ctrl.Manager, o controller.Options) error { return Setup(m, o, conns, env.Shared()) })

	dir := t.TempDir()
	imgA, shaA := qcow2(t, dir, "a.qcow2", 64)
	imgB, shaB := qcow2(t, dir, "b.qcow2", 96)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/a.qcow2", "/mirror/a.qcow2":
			_, _ = w.Write(imgA)
		case "/b.qcow2":
			_, _ = w.Write(imgB)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	// The built-in denial refuses loopback: allow exactly this server, as a platform team
	// allows its mirror.
	env.AllowImageServer(t, "default", srv.URL)
	// Another server on loopback, not allowed.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(imgA) }))
	t.Cleanup(other.Close)

	ctx := context.Background()
	kube := env.Client
	env.Namespace(t, "images")
	lv := libvirt.New(tb.Connect(t), libvirt.NewShared())

	get := func(bi *v1alpha1.BaseImage) error { return kube.Get(ctx, client.ObjectKeyFromObject(bi), bi) }
	readyWith := func(bi *v1alpha1.BaseImage, sha string) func() error {
		return func() error {
			if err := get(bi); err != nil {
				return err
			}
			r, s := bi.GetCondition(xpv2.TypeReady), bi.GetCondition(xpv2.TypeSynced)
			if r.Status != corev1.ConditionTrue || bi.Status.AtProvider.SHA256 != sha {
				return fmt.Errorf("Ready=%s (%s) sha=%s; Synced=%s: %s", r.Status, r.Reason, bi.Status.AtProvider.SHA256, s.Status, s.Message)
			}
			return nil
		}
	}

	t.Run("DigestMismatchIsTerminalAndPublishesNothing", func(t *testing.T) {
		wrong := strings.Repeat("0", 64)
		bi := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "images", Name: "wrong"},
			Spec: v1alpha1.BaseImageSpec{ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: srv.URL + "/a.qcow2", SHA256: wrong}}}}
		if err := kube.Create(ctx, bi); err != nil {
			t.Fatal(err)
		}
		controlplane.Eventually(t, 2*time.Minute, "mismatch reported", func() error {
			if err := get(bi); err != nil {
				return err
			}
			s := bi.GetCondition(xpv2.TypeSynced)
			if s.Status != corev1.ConditionFalse || !strings.Contains(s.Message, wrong) || !strings.Contains(s.Message, shaA) {
				return fmt.Errorf("Synced=%s: %q does not name both digests", s.Status, s.Message)
			}
			return nil
		})
		if bi.GetCondition(xpv2.TypeReady).Status == corev1.ConditionTrue {
			t.Error("a BaseImage with a digest mismatch is Ready")
		}
		vols, err := lv.Volumes(ctx, tb.Pool)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vols {
			if v.Name == externalName(bi) {
				t.Errorf("volume %s exists after a digest mismatch", v.Name)
			}
		}
		if err := kube.Delete(ctx, bi); err != nil {
			t.Fatal(err)
		}
	})

	// (That a changed imageSources retries a refused source is a unit test,
	// TestObserveFailedDownload: here it would wait out crossplane-runtime's 30 s creation
	// grace period.)
	t.Run("RefusedSourceNamesTheRule", func(t *testing.T) {
		bi := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "images", Name: "refused"},
			Spec: v1alpha1.BaseImageSpec{ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: other.URL + "/a.qcow2", SHA256: shaA}}}}
		if err := kube.Create(ctx, bi); err != nil {
			t.Fatal(err)
		}
		controlplane.Eventually(t, 2*time.Minute, "refusal reported", func() error {
			if err := get(bi); err != nil {
				return err
			}
			s := bi.GetCondition(xpv2.TypeSynced)
			if s.Status != corev1.ConditionFalse || !strings.Contains(s.Message, "built-in: loopback 127.0.0.0/8") ||
				!strings.Contains(s.Message, "imageSources of ClusterProviderConfig/default") {
				return fmt.Errorf("Synced=%s: %q does not name the rule and the config", s.Status, s.Message)
			}
			return nil
		})
		vols, err := lv.Volumes(ctx, tb.Pool)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vols {
			if v.Name == externalName(bi) {
				t.Errorf("volume %s exists after a refusal", v.Name)
			}
		}
		// Deleting it waits out crossplane-runtime's creation grace period (30 s); nothing is
		// on the host, so the test goes on meanwhile.
		if err := kube.Delete(ctx, bi); err != nil {
			t.Fatal(err)
		}
	})

	ownerRecords := func(vol string) []string {
		t.Helper()
		names, err := lv.VolumeNames(ctx, tb.Pool)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range names {
			if strings.HasPrefix(n, vol+imagecache.OwnerInfix) {
				out = append(out, n)
			}
		}
		return out
	}
	gone := func(bi *v1alpha1.BaseImage) func() error {
		return func() error {
			if err := get(bi); !kerrors.IsNotFound(err) {
				return fmt.Errorf("still present (%v): Synced %q", err, bi.GetCondition(xpv2.TypeSynced).Message)
			}
			return nil
		}
	}
	volumeExists := func(vol string) bool {
		_, err := lv.Volume(ctx, tb.Pool, vol)
		if err != nil && !libvirt.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}

	t.Run("TwoNamespacesShareOneVolume", func(t *testing.T) {
		env.Namespace(t, "team-b")
		mine := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "images", Name: "shared"},
			Spec: v1alpha1.BaseImageSpec{ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: srv.URL + "/a.qcow2", SHA256: shaA}}}}
		theirs := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "debian-12"},
			Spec: v1alpha1.BaseImageSpec{ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: srv.URL + "/mirror/a.qcow2", SHA256: shaA}}}}
		for _, bi := range []*v1alpha1.BaseImage{mine, theirs} {
			if err := kube.Create(ctx, bi); err != nil {
				t.Fatal(err)
			}
		}
		controlplane.Eventually(t, 2*time.Minute, "both Ready", func() error {
			for _, bi := range []*v1alpha1.BaseImage{mine, theirs} {
				if err := readyWith(bi, shaA)(); err != nil {
					return fmt.Errorf("%s/%s: %w", bi.Namespace, bi.Name, err)
				}
			}
			return nil
		})
		vol := mine.Status.AtProvider.VolumeName
		if theirs.Status.AtProvider.VolumeName != vol || mine.Status.AtProvider.Path != theirs.Status.AtProvider.Path {
			t.Fatalf("volumes %s and %s, want one shared volume", vol, theirs.Status.AtProvider.VolumeName)
		}
		if theirs.Status.AtProvider.SourceURL != srv.URL+"/mirror/a.qcow2" || !theirs.Status.AtProvider.Verified {
			t.Errorf("team-b's status shows source %q verified %v, want its own URL, verified", theirs.Status.AtProvider.SourceURL, theirs.Status.AtProvider.Verified)
		}
		if got := ownerRecords(vol); len(got) != 2 {
			t.Fatalf("owner records %v, want two", got)
		}
		// Deleting either keeps the volume for the other.
		if err := kube.Delete(ctx, mine); err != nil {
			t.Fatal(err)
		}
		controlplane.Eventually(t, time.Minute, "images/shared deleted", gone(mine))
		if !volumeExists(vol) || len(ownerRecords(vol)) != 1 {
			t.Fatalf("after deleting one owner: volume exists %v, owner records %v", volumeExists(vol), ownerRecords(vol))
		}
		if err := readyWith(theirs, shaA)(); err != nil {
			t.Fatalf("team-b's BaseImage after images/shared was deleted: %v", err)
		}

		// A restored cluster: the BaseImage is recreated with a new UID, its old one gone
		// (its finalizer dropped as a lost cluster would). It attaches again, and the record
		// of the old UID is cleaned up.
		oldUID := theirs.GetUID()
		if err := get(theirs); err != nil {
			t.Fatal(err)
		}
		theirs.SetFinalizers(nil)
		if err := kube.Update(ctx, theirs); err != nil {
			t.Fatal(err)
		}
		if err := kube.Delete(ctx, theirs); err != nil && !kerrors.IsNotFound(err) {
			t.Fatal(err)
		}
		controlplane.Eventually(t, time.Minute, "team-b/debian-12 gone from the cluster", gone(theirs))
		restored := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "debian-12"},
			Spec: v1alpha1.BaseImageSpec{ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: srv.URL + "/mirror/a.qcow2", SHA256: shaA}}}}
		if err := kube.Create(ctx, restored); err != nil {
			t.Fatal(err)
		}
		controlplane.Eventually(t, 2*time.Minute, "restored BaseImage Ready", readyWith(restored, shaA))
		if restored.GetUID() == oldUID || restored.Status.AtProvider.VolumeName != vol {
			t.Fatalf("restored BaseImage UID %s (old %s) on volume %s, want a new UID on %s", restored.GetUID(), oldUID, restored.Status.AtProvider.VolumeName, vol)
		}
		controlplane.Eventually(t, time.Minute, "the old UID's record cleaned up", func() error {
			if got := ownerRecords(vol); len(got) != 1 || got[0] != imagecache.OwnerName(vol, string(restored.GetUID())) {
				return fmt.Errorf("owner records %v, want the restored UID's alone", got)
			}
			return nil
		})
		// Deleting the last owner removes the volume.
		if err := kube.Delete(ctx, restored); err != nil {
			t.Fatal(err)
		}
		controlplane.Eventually(t, time.Minute, "team-b/debian-12 deleted", gone(restored))
		if volumeExists(vol) || len(ownerRecords(vol)) != 0 {
			t.Fatalf("after deleting the last owner: volume exists %v, owner records %v", volumeExists(vol), ownerRecords(vol))
		}
	})

	bi := &v1alpha1.BaseImage{ObjectMeta: metav1.ObjectMeta{Namespace: "images", Name: "debian"},
		Spec: v1alpha1.BaseImageSpec{ForProvider: v1alpha1.BaseImageParameters{Source: v1alpha1.ImageSource{URL: srv.URL + "/a.qcow2", SHA256: shaA}}}}
	if err := kube.Create(ctx, bi); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, 2*time.Minute, "BaseImage A Ready", readyWith(bi, shaA))
	at := bi.Status.AtProvider
	if !at.Verified || at.VirtualSizeBytes != 64<<20 || at.SizeBytes != int64(len(imgA)) || at.Path == "" {
		t.Errorf("status after publish: %+v", at)
	}
	oldPath, oldVol := at.Path, at.VolumeName

	// An overlay backs onto A, as the root disk of a KVMDomain of the same namespace would
	// (named as names.Overlay names it: a BaseImage's messages name its own namespace's disks
	// and only count others').
	overlay := names.Overlay("images", "vm", "0c0ffee0-0000-4000-8000-000000000001")
	overlayXML, err := libvirt.VolumeXML(libvirt.VolumeSpec{Name: overlay, Format: "qcow2", CapacityBytes: 64 << 20, BackingStorePath: oldPath, BackingStoreFormat: "qcow2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lv.CreateVolume(ctx, tb.Pool, overlayXML); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lv.DeleteVolume(context.Background(), tb.Pool, overlay) })

	// Editing the source publishes B and keeps A while the overlay uses it.
	if err := get(bi); err != nil {
		t.Fatal(err)
	}
	bi.Spec.ForProvider.Source = v1alpha1.ImageSource{URL: srv.URL + "/b.qcow2", SHA256: shaB}
	if err := kube.Update(ctx, bi); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, 2*time.Minute, "BaseImage B Ready", readyWith(bi, shaB))
	if bi.Status.AtProvider.VolumeName == oldVol {
		t.Fatalf("the edited source reuses the old volume %s", oldVol)
	}
	controlplane.Eventually(t, time.Minute, "old volume retained", func() error {
		if err := get(bi); err != nil {
			return err
		}
		if len(bi.Status.AtProvider.RetainedVolumes) != 1 {
			return fmt.Errorf("retained %v", bi.Status.AtProvider.RetainedVolumes)
		}
		return nil
	})
	if _, err := os.Stat(oldPath); err != nil {
		t.Fatalf("old base removed while an overlay uses it: %v", err)
	}

	// Deleting the BaseImage is held while the overlay uses a volume of it.
	if err := kube.Delete(ctx, bi); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, time.Minute, "deletion held", func() error {
		if err := get(bi); err != nil {
			return err
		}
		if s := bi.GetCondition(xpv2.TypeSynced); !strings.Contains(s.Message, "held") || !strings.Contains(s.Message, overlay) {
			return fmt.Errorf("Synced=%s: %q", s.Status, s.Message)
		}
		return nil
	})
	if _, err := os.Stat(oldPath); err != nil {
		t.Fatalf("base removed while an overlay uses it: %v", err)
	}

	// Once the overlay is gone, everything goes.
	if err := lv.DeleteVolume(ctx, tb.Pool, overlay); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, time.Minute, "BaseImage deleted", func() error {
		if err := get(bi); !kerrors.IsNotFound(err) {
			return fmt.Errorf("still present (%v): Synced %q, retained %v", err, bi.GetCondition(xpv2.TypeSynced).Message, bi.Status.AtProvider.RetainedVolumes)
		}
		return nil
	})
	vols, err := lv.Volumes(ctx, tb.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if strings.HasPrefix(v.Name, "pkvm-base-") && (strings.Contains(v.Name, oldVol) || v.Name == bi.Status.AtProvider.VolumeName) {
			t.Errorf("volume %s left behind", v.Name)
		}
	}
}

func externalName(bi *v1alpha1.BaseImage) string {
	return bi.GetAnnotations()["crossplane.io/external-name"]
}
