package faults

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/controller/kvmdomain"
	"github.com/provider-kvm/provider-kvm/internal/names"
)

// writerPrefix names images whose first sector is writerBootSector: a guest that writes to its
// disk, with no operating system to boot (one under TCG takes a minute or more).
const writerPrefix = "writer-"

// writerBootSector is a BIOS boot sector that writes 258 times 127 sectors (16 MiB, from LBA
// 2048, past the image) to the boot disk with INT 13h AH=43h, then halts. Assembled with GNU as
// (`as --32`, `ld -m elf_i386 -Ttext 0x7c00 --oformat binary`) from:
//
//	    .code16
//	    cli; xorw %ax,%ax; movw %ax,%ds; movw %ax,%ss; movw $0x7c00,%sp; sti
//	    movb %dl, drive
//	1:  movw $dap, %si; movb $0x43, %ah; movb $0, %al; movb drive, %dl; int $0x13
//	    addw $127, dap+8; adcw $0, dap+10; decw count; jnz 1b
//	2:  hlt; jmp 2b
//	    .balign 4
//	dap: .byte 0x10, 0; .word 127; .word 0x0000, 0x1000; .quad 2048
//	count: .word 258
//	drive: .byte 0
//	    .org 510; .byte 0x55, 0xaa
var writerBootSector = func() []byte {
	code, err := hex.DecodeString("fa31c08ed88ed0bc007cfb8816427cbe307cb443b0008a16427ccd138306387c7f83163a7c00ff0e407c75e3f4ebfd9010007f00000000100008000000000000020100")
	if err != nil {
		panic(err)
	}
	b := make([]byte, 512)
	copy(b, code)
	b[510], b[511] = 0x55, 0xaa
	return b
}()

const (
	// pausedNamespace holds the paused-guest case's resources.
	pausedNamespace = nsPrefix + "paused"
	// pausedConfig is the ClusterProviderConfig whose default pool is the case's small pool.
	pausedConfig = "paused"
	// The small pool: the 4 MiB image, the seed, the overlay's first clusters and a 12 MiB
	// ballast leave about 11 MiB for the guest's 16 MiB of writes; with the ballast gone it
	// has room for them and still 2 MiB free (limits.minFreePoolMiB).
	pausedPoolSize    = 28 << 20
	pausedBallastMiB  = 12
	pausedMinFreeMiB  = 2
	pausedStillPaused = 20 * time.Second
)

// pausedGuest: a guest whose root disk's pool fills up while it writes is paused by QEMU on the
// I/O error (ENOSPC). The provider shows Paused=True with reason IOError and, while the pool is
// still full, leaves it paused (resuming it would only pause it again); once space is freed it
// resumes the guest, says so in an event, and the guest finishes its writes and runs on.
func (s *suite) pausedGuest(t *testing.T) {
	p := s.startProvider(t, "PausedGuest", "")
	defer p.Stop()
	pool := s.smallPoolConfig(t, pausedConfig, pausedPoolSize, pausedMinFreeMiB)
	ctx := context.Background()

	var (
		recovered time.Duration
		notes     []string
	)
	img := writerPrefix + "paused"
	defer func() { s.record(t, recovered, s.smallPoolLeaks(t, pool.Name, []string{img}), notes...) }()
	mrs := s.set(pausedNamespace, pausedConfig, img, v1alpha1.PowerStateRunning)
	vm := mrs[2].(*v1alpha1.KVMDomain)
	vm.Spec.ForProvider.DiskSizeGiB = ptr.To[int32](1)   // room past the image for the writes
	vm.Spec.ForProvider.Firmware = v1alpha1.FirmwareBIOS // the writer is a BIOS boot sector
	s.create(t, mrs[:2])
	wait(t, recoverBound, "the image and the seed Ready", func() error { return s.notReady(mrs[:2]) })

	// The ballast takes what the guest needs; it is deleted to free space.
	ballast := "ballast"
	if out, err := virsh("vol-create-as", pool.Name, ballast, fmt.Sprintf("%dM", pausedBallastMiB),
		"--allocation", fmt.Sprintf("%dM", pausedBallastMiB), "--format", "raw"); err != nil {
		t.Fatalf("virsh vol-create-as: %v\n%s", err, out)
	}
	t.Logf("small pool %s: %s KiB used with the image, the seed and the ballast", pool.Name, pool.UsedKiB(t))
	s.create(t, mrs[2:])

	domain := names.Domain(pausedNamespace, vm.Name)
	started := time.Now()
	wait(t, recoverBound, "the domain Paused on an I/O error", func() error {
		if err := s.kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			return err
		}
		if c := vm.GetCondition(kvmdomain.ConditionPaused); c.Status != corev1.ConditionTrue || c.Reason != kvmdomain.ReasonIOError {
			return fmt.Errorf("state %q, Paused %s %s; Ready %q", vm.Status.AtProvider.State, c.Status, c.Reason, vm.GetCondition(xpv2.TypeReady).Message)
		}
		return nil
	})
	notes = append(notes, fmt.Sprintf("paused on ENOSPC %s after the domain was created", time.Since(started).Round(time.Second)))
	if m := vm.GetCondition(xpv2.TypeReady).Message; !strings.Contains(m, "QEMU paused it when a write to its disk failed") || !strings.Contains(m, pool.Name) {
		t.Errorf("the Ready message does not say why the domain is paused, naming pool %s: %q", pool.Name, m)
	}

	// The pool is still full: not resumed (it would pause again at once).
	deadline := time.Now().Add(pausedStillPaused)
	for time.Now().Before(deadline) {
		if st, _ := virsh("domstate", "--reason", "--domain", domain); !strings.Contains(st, "paused") {
			t.Fatalf("the domain left its pause while its pool was full: %s", strings.TrimSpace(st))
		}
		time.Sleep(2 * time.Second)
	}
	if n := s.events(t, vm, "ResumedAfterIOError"); len(n) > 0 {
		t.Fatalf("resumed while the pool was full: %v", n)
	}
	notes = append(notes, fmt.Sprintf("still paused %s later, its pool full", pausedStillPaused))

	// Space freed: resumed, the event says so, and the guest finishes its writes.
	if out, err := virsh("vol-delete", "--pool", pool.Name, ballast); err != nil {
		t.Fatalf("virsh vol-delete: %v\n%s", err, out)
	}
	freed := time.Now()
	wait(t, recoverBound, "the domain resumed once space is freed", func() error {
		if err := s.kube.Get(ctx, client.ObjectKeyFromObject(vm), vm); err != nil {
			return err
		}
		if c := vm.GetCondition(kvmdomain.ConditionPaused); c.Status == corev1.ConditionTrue || vm.Status.AtProvider.State != "Running" {
			return fmt.Errorf("state %q, Paused %s %s", vm.Status.AtProvider.State, c.Status, c.Reason)
		}
		if n := s.events(t, vm, "ResumedAfterIOError"); len(n) == 0 {
			return fmt.Errorf("running, but no ResumedAfterIOError event yet")
		}
		return nil
	})
	recovered = time.Since(freed)
	notes = append(notes, fmt.Sprintf("resumed %s after space was freed", recovered.Round(time.Second)))
	time.Sleep(10 * time.Second) // the rest of the writes
	if st, err := virsh("domstate", "--reason", "--domain", domain); err != nil || !strings.Contains(st, "running") {
		t.Errorf("after its writes the guest is not running: %s %v", strings.TrimSpace(st), err)
	}
	t.Logf("small pool %s: %s KiB used after the writes", pool.Name, pool.UsedKiB(t))

	if err := s.deleteAll(ctx, mrs); err != nil {
		t.Fatal(err)
	}
	wait(t, recoverBound, "every resource gone after its deletion", func() error { return s.notGone(mrs) })
}

// events are the messages of the events of reason on obj.
func (s *suite) events(t *testing.T, obj client.Object, reason string) []string {
	t.Helper()
	var l corev1.EventList
	if err := s.kube.List(context.Background(), &l, client.InNamespace(obj.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range l.Items {
		if e.InvolvedObject.UID == obj.GetUID() && e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

// deleteAll deletes mrs.
func (s *suite) deleteAll(ctx context.Context, mrs []resource.Managed) error {
	for _, mr := range mrs {
		if err := s.kube.Delete(ctx, mr); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}
