package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// disruptCase breaks the host (not the provider) while a stack is being made or once it is
// Ready: its daemons restarted or their connections cut mid-upload, its objects deleted out of
// band. The provider keeps running; the stack must be Ready within recoverBound of the
// disruption and leave nothing behind once deleted.
type disruptCase struct {
	name string
	// midUpload: act once the image server has sent a quarter of the BaseImage's (slow)
	// image; else once the stack is Ready.
	midUpload bool
	act       func(t *testing.T, s *suite, ns string)
}

func (dc disruptCase) namespace() string { return nsPrefix + "d-" + dc.name }

var disruptCases = []disruptCase{
	{name: "ssh-sessions-killed-mid-upload", midUpload: true, act: func(t *testing.T, s *suite, _ string) {
		s.tb.Control(t, "kill-ssh-sessions")
	}},
	{name: "sshd-restarted-mid-upload", midUpload: true, act: func(t *testing.T, s *suite, _ string) {
		s.tb.Control(t, "restart-sshd")
	}},
	{name: "libvirtd-restarted-mid-create", midUpload: true, act: func(t *testing.T, s *suite, _ string) {
		s.tb.Control(t, "restart-libvirtd")
	}},
	{name: "ssh-secret-rotated", act: func(t *testing.T, s *suite, _ string) {
		// Another authorized key of the test bed; the resources must stay Ready through the
		// polls that follow (each connects with the new key).
		s.rotateKey(t, os.Getenv("TESTBED_SSH_KEY_RSA"))
		t.Cleanup(func() { s.rotateKey(t, s.tb.KeyFile) })
		time.Sleep(2 * pollInterval)
	}},
	{name: "deleted-out-of-band", act: func(t *testing.T, s *suite, ns string) {
		// The domain (shut off) and the seed volume, as an operator's virsh would.
		if _, err := virsh("undefine", "--nvram", ns+"_vm"); err != nil {
			t.Fatal(err)
		}
		out, err := virsh("vol-list", "--pool", s.tb.Pool)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines(out) {
			if name := strings.Fields(l)[0]; strings.HasPrefix(name, ns+"_") && strings.HasSuffix(name, ".seed.iso") {
				if _, err := virsh("vol-delete", "--pool", s.tb.Pool, name); err != nil {
					t.Fatal(err)
				}
			}
		}
		// The resources may still say Ready the moment after: wait for the host objects to
		// be back, so that "Ready again" below means recreated.
		wait(t, recoverBound, "the domain and the seed volume recreated", func() error {
			if _, err := virsh("domstate", ns+"_vm"); err != nil {
				return err
			}
			out, err := virsh("vol-list", "--pool", s.tb.Pool)
			if err != nil {
				return err
			}
			for _, l := range lines(out) {
				if name := strings.Fields(l)[0]; strings.HasPrefix(name, ns+"_") && strings.HasSuffix(name, ".seed.iso") {
					return nil
				}
			}
			return fmt.Errorf("no seed volume of %s", ns)
		})
	}},
}

func (s *suite) disruptCases(t *testing.T) {
	p := s.startProvider(t, "Disrupt", "")
	defer p.Stop()
	for _, dc := range disruptCases {
		t.Run(dc.name, func(t *testing.T) {
			ns := dc.namespace()
			img := ns
			if dc.midUpload {
				img = slowPrefix + ns
			}
			var recovered time.Duration
			defer func() { s.record(t, recovered, s.leaks(t, []string{ns}, []string{img})) }()
			mrs := s.set(ns, "default", img, v1alpha1.PowerStateStopped)
			s.create(t, mrs)
			if dc.midUpload {
				wait(t, recoverBound, "a quarter of the image sent", func() error {
					if n := s.sentOf(img); n < imageSize/4 {
						return fmt.Errorf("%d bytes sent", n)
					}
					return nil
				})
			} else {
				wait(t, recoverBound, "every resource Ready", func() error { return s.notReady(mrs) })
			}
			dc.act(t, s, ns)
			recovered = wait(t, recoverBound, "every resource Ready after the disruption", func() error { return s.notReady(mrs) })
			stop := s.remove(t, mrs)
			defer stop()
			wait(t, recoverBound, "every resource gone after its deletion", func() error { return s.notGone(mrs) })
		})
	}
}

const twoProvidersNamespace = nsPrefix + "two"

// twoProviders: two provider processes at once, leader election off (a rolling update or two
// replicas without it), while a BaseImage publishes a slow image and a KVMDomain waits for it
// to create its overlay and domain; both run until the stack is deleted. The stack must be
// Ready and leave nothing behind, and no domain may run on a base the other process left
// half-written (the monitor).
func (s *suite) twoProviders(t *testing.T) {
	ns := twoProvidersNamespace
	img := slowPrefix + ns
	var recovered time.Duration
	defer func() { s.record(t, recovered, s.leaks(t, []string{ns}, []string{img})) }()
	mrs := s.set(ns, "default", img, v1alpha1.PowerStateRunning)
	s.create(t, mrs)
	start := time.Now()
	p1 := s.startProvider(t, "TwoProviders-1", "")
	p2 := s.startProvider(t, "TwoProviders-2", "")
	wait(t, recoverBound, "every resource Ready with two providers", func() error { return s.notReady(mrs) })
	recovered = time.Since(start)
	stop := s.remove(t, mrs)
	defer stop()
	wait(t, recoverBound, "every resource gone after its deletion with two providers", func() error { return s.notGone(mrs) })
	p1.Stop()
	p2.Stop()
}

// rotateKey puts the private key of file into the default host's SSH Secret.
func (s *suite) rotateKey(t *testing.T, file string) {
	t.Helper()
	if file == "" {
		t.Fatal("no key file to rotate to (TESTBED_SSH_KEY_RSA)")
	}
	key := s.tb.Read(t, file)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sec := &corev1.Secret{}
		if err := s.kube.Get(context.Background(), types.NamespacedName{Namespace: "crossplane-system", Name: "default-ssh"}, sec); err != nil {
			return err
		}
		sec.Data["ssh-privatekey"] = key
		return s.kube.Update(context.Background(), sec)
	})
	if err != nil {
		t.Fatalf("rotating the SSH key: %v", err)
	}
}
