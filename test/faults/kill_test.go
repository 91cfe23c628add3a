package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	fp "github.com/provider-kvm/provider-kvm/internal/faultpoint"
)

// Bounds of the kill cases, generous for a loaded two-core machine: a restarted provider has
// every resource Ready again (a create) or gone (a delete) within recoverBound; the killed one
// reaches its point within reachBound.
const (
	recoverBound = 3 * time.Minute
	reachBound   = 3 * time.Minute
)

// killCase kills the provider at point while it creates (create) or deletes the resources of
// one stack.
type killCase struct {
	point  string
	create bool
	fast   bool // part of the subset go test ./... runs
	// running: the KVMDomain's powerState is Running (the points of starting and stopping a
	// guest); else Stopped, so that no guest burns a core under TCG.
	running bool
}

var killCases = []killCase{
	{point: fp.BaseOwnerWritten, create: true},
	{point: fp.BaseClaimWritten, create: true},
	{point: fp.BaseDataCreated, create: true},
	{point: fp.BaseMidUpload, create: true, fast: true},
	{point: fp.BaseUploaded, create: true},
	{point: fp.BaseMarkerWritten, create: true},
	{point: fp.SeedRecordWritten, create: true},
	{point: fp.SeedVolumeCreated, create: true},
	{point: fp.SeedUploaded, create: true},
	{point: fp.DomainOverlayRecord, create: true},
	{point: fp.DomainOverlayCreated, create: true},
	{point: fp.DomainDefined, create: true},
	{point: fp.DomainStarted, create: true, running: true},
	{point: fp.BaseRemoveClaim},
	{point: fp.BaseRemoveMarker, fast: true},
	{point: fp.BaseRemoveDeleted + "#1"}, // the data deleted, its owner record and claim not
	{point: fp.BaseRemoveDeleted + "#2"}, // the owner record deleted, the claim not
	{point: fp.SeedDeleteVolume},
	{point: fp.DomainPowerOff, running: true},
	{point: fp.DomainUndefined},
	{point: fp.DomainOverlayDeleted},
}

// killCases: for each point, the provider is SIGKILLed there and started again. The objects
// are kept (their spec, metadata and finalizers, as a restore from a backup keeps them), and
// their status is emptied before the restart: the new process knows nothing but what it finds
// on the host. Then the stack must be Ready (or gone) within recoverBound and nothing of it may
// be left on the host once it is deleted.
func (s *suite) killCases(t *testing.T) {
	for i, kc := range killCases {
		if !kc.fast && !full() {
			continue
		}
		op := "delete"
		if kc.create {
			op = "create"
		}
		t.Run(op+"/"+strings.ReplaceAll(kc.point, "#", "-"), func(t *testing.T) {
			ns := fmt.Sprintf("%sk%02d", nsPrefix, i)
			img := ns
			power := v1alpha1.PowerStateStopped
			if kc.running {
				power = v1alpha1.PowerStateRunning
			}
			mrs := s.set(ns, "default", img, power)
			var recovered time.Duration
			// Counted even when the case failed half-way: what a stuck case left is reported.
			defer func() { s.record(t, recovered, s.leaks(t, []string{ns}, []string{img})) }()
			if kc.create {
				recovered = s.killCreate(t, kc.point, mrs)
			} else {
				recovered = s.killDelete(t, kc.point, mrs)
			}
		})
	}
}

func (s *suite) killCreate(t *testing.T, point string, mrs []resource.Managed) time.Duration {
	name := strings.ReplaceAll(t.Name(), "/", "_")
	s.create(t, mrs)
	p := s.startProvider(t, name+"-killed", point)
	if err := p.waitKilled(reachBound, point); err != nil {
		t.Fatal(err)
	}
	s.wipeStatus(t, mrs)
	p = s.startProvider(t, name+"-restarted", "")
	rec := wait(t, recoverBound, "every resource Ready after the restart", func() error { return s.notReady(mrs) })
	stop := s.remove(t, mrs)
	defer stop()
	wait(t, recoverBound, "every resource gone after its deletion", func() error { return s.notGone(mrs) })
	p.Stop()
	return rec
}

func (s *suite) killDelete(t *testing.T, point string, mrs []resource.Managed) time.Duration {
	name := strings.ReplaceAll(t.Name(), "/", "_")
	s.create(t, mrs)
	p := s.startProvider(t, name+"-setup", "")
	wait(t, recoverBound, "every resource Ready before the deletion", func() error { return s.notReady(mrs) })
	p.Stop()
	p = s.startProvider(t, name+"-killed", point)
	stop := s.remove(t, mrs)
	defer stop()
	if err := p.waitKilled(reachBound, point); err != nil {
		t.Fatal(err)
	}
	s.wipeStatus(t, mrs)
	p = s.startProvider(t, name+"-restarted", "")
	rec := wait(t, recoverBound, "every resource gone after the restart", func() error { return s.notGone(mrs) })
	p.Stop()
	return rec
}
