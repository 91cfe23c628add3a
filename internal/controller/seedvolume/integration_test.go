package seedvolume

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kdomanski/iso9660"
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
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// A user-data that a YAML round trip would damage: 1.10 would become 1.1, the comment would go.
const userData = "#cloud-config\n# this comment must survive\nversion: 1.10\nruncmd:\n  - [echo, \"quoted: yes\"]\n"

// readISO returns the files at the root of an ISO image, by the names a guest sees.
func readISO(t *testing.T, iso []byte) map[string][]byte {
	t.Helper()
	files, err := isoFiles(iso)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// isoFiles is readISO for polling: a volume being rewritten is not an ISO yet.
func isoFiles(iso []byte) (map[string][]byte, error) {
	img, err := iso9660.OpenImage(bytes.NewReader(iso))
	if err != nil {
		return nil, fmt.Errorf("open ISO: %w", err)
	}
	root, err := img.RootDir()
	if err != nil {
		return nil, err
	}
	kids, err := root.GetChildren()
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, k := range kids {
		b, err := io.ReadAll(k.Reader())
		if err != nil {
			return nil, err
		}
		out[k.Name()] = b
	}
	return out, nil
}

// TestSeedVolumeOnRealHost runs the SeedVolume controller against a real API server and the
// real libvirt test bed, through real SSH.
func TestSeedVolumeOnRealHost(t *testing.T) {
	tb := testbed.Require(t)
	env := controlplane.Start(t)
	env.HostConfig(t, tb, "default")
	conns := host.NewConnections()
	t.Cleanup(func() { _ = conns.Close() })
	env.Run(t, 2*time.Second, config.Setup, func(m ctrl.Manager, o controller.Options) error { return Setup(m, o, conns, env.Shared()) })

	ctx := context.Background()
	kube := env.Client
	env.Namespace(t, "seeds")
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "seeds", Name: "ud"}, Data: map[string][]byte{"user-data": []byte(userData)}}
	if err := kube.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	sv := &v1alpha1.SeedVolume{
		ObjectMeta: metav1.ObjectMeta{Namespace: "seeds", Name: "proxy-1"},
		Spec: v1alpha1.SeedVolumeSpec{ForProvider: v1alpha1.SeedVolumeParameters{
			Hostname:          "proxy-1",
			UserDataSecretRef: &v1alpha1.LocalSecretKeySelector{Name: "ud", Key: "user-data"},
		}},
	}
	if err := kube.Create(ctx, sv); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(sv)

	ready := func(wantSHA string) func() error {
		return func() error {
			if err := kube.Get(ctx, key, sv); err != nil {
				return err
			}
			if c := sv.GetCondition(xpv2.TypeReady); c.Status != corev1.ConditionTrue {
				s := sv.GetCondition(xpv2.TypeSynced)
				return errorf("Ready=%s (%s); Synced=%s: %s", c.Status, c.Reason, s.Status, s.Message)
			}
			if wantSHA != "" && sv.Status.AtProvider.ISOSHA256 == wantSHA {
				return errorf("status still shows the old digest %s", wantSHA)
			}
			return nil
		}
	}
	controlplane.Eventually(t, 2*time.Minute, "SeedVolume Ready", ready(""))

	// The volume on the host holds exactly the bytes we asked for.
	lv := libvirt.New(tb.Connect(t), libvirt.NewShared())
	download := func() ([]byte, error) {
		var buf bytes.Buffer
		err := lv.Download(ctx, sv.Status.AtProvider.Pool, sv.Status.AtProvider.VolumeName, &buf, 0, 0)
		return buf.Bytes(), err
	}
	hostISO := func() []byte {
		t.Helper()
		b, err := download()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	files := readISO(t, hostISO())
	if got := string(files["user-data"]); got != userData {
		t.Errorf("user-data on the host differs:\n got %q\nwant %q", got, userData)
	}
	if md := string(files["meta-data"]); !strings.Contains(md, sv.Status.AtProvider.InstanceID) || !strings.Contains(md, "proxy-1") {
		t.Errorf("meta-data lacks instance-id %s or hostname: %q", sv.Status.AtProvider.InstanceID, md)
	}
	if vd := string(files["vendor-data"]); !strings.HasPrefix(vd, "#!/bin/sh") {
		t.Errorf("vendor-data is not the guest agent script: %.40q", vd)
	}

	// Truncated out of band: the next poll repairs it.
	oldSHA := sv.Status.AtProvider.ISOSHA256
	if err := os.Truncate(sv.Status.AtProvider.Path, 4096); err != nil {
		t.Fatalf("truncate seed volume: %v", err)
	}
	controlplane.Eventually(t, time.Minute, "truncated seed repaired", func() error {
		// The torn volume is removed and published again: it is missing for a moment.
		got, err := download()
		if err != nil {
			return err
		}
		files, err := isoFiles(got)
		if err != nil || len(got) != int(sv.Status.AtProvider.SizeBytes) || string(files["user-data"]) != userData {
			return errorf("volume still damaged (%d bytes, %v)", len(got), err)
		}
		return nil
	})

	// A domain reads the seed (a shut-off definition is enough: libvirt lists its disks).
	firstVol, firstPath := sv.Status.AtProvider.VolumeName, sv.Status.AtProvider.Path
	user := "seeds_reader-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	domXML := "<domain type='qemu'><name>" + user + "</name><memory unit='MiB'>64</memory><os><type>hvm</type></os>" +
		"<devices><disk type='file' device='cdrom'><driver name='qemu' type='raw'/><source file='" + firstPath + "'/>" +
		"<target dev='sda' bus='scsi'/><readonly/></disk></devices></domain>"
	if err := lv.DefineDomain(ctx, domXML); err != nil {
		t.Fatal(err)
	}
	undefined := false
	undefine := func() {
		if !undefined {
			undefined = true
			if err := lv.UndefineDomain(ctx, user); err != nil {
				t.Errorf("undefine %s: %v", user, err)
			}
		}
	}
	t.Cleanup(undefine)

	// An edit of the user-data is published as a new volume; the one the domain reads is never
	// written, and stays until no domain uses it.
	sec.Data["user-data"] = []byte(userData + "# edited\n")
	if err := kube.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, time.Minute, "edited user-data uploaded", ready(oldSHA))
	if got := string(readISO(t, hostISO())["user-data"]); got != userData+"# edited\n" {
		t.Errorf("edited user-data on the host: %q", got)
	}
	if sv.Status.AtProvider.VolumeName == firstVol {
		t.Fatalf("the edit was written into %s, the volume a domain reads", firstVol)
	}
	if got := sv.Status.AtProvider.RetiredVolumes; len(got) != 1 || got[0] != firstVol {
		t.Errorf("retired volumes %v, want [%s] (a domain still reads it)", got, firstVol)
	}
	var first bytes.Buffer
	if err := lv.Download(ctx, sv.Status.AtProvider.Pool, firstVol, &first, 0, 0); err != nil {
		t.Fatalf("the volume a domain reads is gone: %v", err)
	}
	if got := string(readISO(t, first.Bytes())["user-data"]); got != userData {
		t.Errorf("the volume a domain reads was changed: user-data %q", got)
	}
	// Once no domain uses it, the next poll removes it and its record.
	undefine()
	controlplane.Eventually(t, time.Minute, "unused earlier seed removed", func() error {
		if _, err := os.Stat(firstPath); !os.IsNotExist(err) {
			return errorf("%s still there (%v)", firstPath, err)
		}
		if _, err := lv.Volume(ctx, sv.Status.AtProvider.Pool, ownership.RecordVolume(firstVol)); !libvirt.IsNotFound(err) {
			return errorf("its ownership record is still there (%v)", err)
		}
		return nil
	})

	// A seed that shrinks (libvirt never shrinks a volume below its allocation) is a new
	// volume of its own size.
	sec.Data["user-data"] = []byte("#cloud-config\n" + strings.Repeat("# padding to make the seed large\n", 4096))
	if err := kube.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, time.Minute, "large seed published", ready(sv.Status.AtProvider.ISOSHA256))
	bigSHA, bigSize := sv.Status.AtProvider.ISOSHA256, sv.Status.AtProvider.SizeBytes
	sec.Data["user-data"] = []byte("#cloud-config\n")
	if err := kube.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, time.Minute, "shrunk seed published", ready(bigSHA))
	if sv.Status.AtProvider.SizeBytes >= bigSize {
		t.Errorf("the shrunk seed is %d bytes, not less than %d", sv.Status.AtProvider.SizeBytes, bigSize)
	}
	if got := string(readISO(t, hostISO())["user-data"]); got != "#cloud-config\n" {
		t.Errorf("shrunk user-data on the host: %q", got)
	}

	// Secrets never reach events or conditions.
	evs := &corev1.EventList{}
	if err := kube.List(ctx, evs, client.InNamespace("seeds")); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if strings.Contains(e.Message, "must survive") {
			t.Errorf("event leaks user-data: %s", e.Message)
		}
	}

	// A host that cannot be reached: the resource says so, Synced=False with the reason.
	t.Run("UnreachableHostIsReported", func(t *testing.T) {
		cpc := &v1alpha1.ClusterProviderConfig{}
		if err := kube.Get(ctx, client.ObjectKey{Name: "default"}, cpc); err != nil {
			t.Fatal(err)
		}
		down := &v1alpha1.ClusterProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "unreachable"}, Spec: *cpc.Spec.DeepCopy()}
		down.Spec.Port = 1 // nothing listens there in the test bed's namespace
		if err := kube.Create(ctx, down); err != nil {
			t.Fatal(err)
		}
		lost := &v1alpha1.SeedVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "seeds", Name: "lost"}}
		lost.SetProviderConfigReference(&xpv2.ProviderConfigReference{Kind: v1alpha1.ClusterProviderConfigKind, Name: "unreachable"})
		if err := kube.Create(ctx, lost); err != nil {
			t.Fatal(err)
		}
		controlplane.Eventually(t, time.Minute, "connection failure reported", func() error {
			if err := kube.Get(ctx, client.ObjectKeyFromObject(lost), lost); err != nil {
				return err
			}
			s := lost.GetCondition(xpv2.TypeSynced)
			if s.Status != corev1.ConditionFalse || !strings.Contains(s.Message, "cannot connect to the libvirt host of ClusterProviderConfig/unreachable") {
				return errorf("Synced=%s %q", s.Status, s.Message)
			}
			return nil
		})
		// The reachable host's resource stays healthy meanwhile.
		if err := kube.Get(ctx, key, sv); err != nil {
			t.Fatal(err)
		}
		if sv.GetCondition(xpv2.TypeSynced).Status != corev1.ConditionTrue {
			t.Errorf("the healthy SeedVolume is not Synced while another host is down: %q", sv.GetCondition(xpv2.TypeSynced).Message)
		}
		// lost stays: deleting it would (rightly) wait for the host to confirm; the control
		// plane goes away with the test.
	})

	// Delete: the volume goes, then the resource.
	path := sv.Status.AtProvider.Path
	if err := kube.Delete(ctx, sv); err != nil {
		t.Fatal(err)
	}
	controlplane.Eventually(t, time.Minute, "SeedVolume deleted", func() error {
		if err := kube.Get(ctx, key, sv); !kerrors.IsNotFound(err) {
			return errorf("still present (%v)", err)
		}
		return nil
	})
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("seed volume file %s still exists after delete (%v)", path, err)
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
