// Package faultpoint marks the steps between which the fault suite (test/faults, make
// test-faults) kills the provider. Reach(name) is a no-op in every normal build; built with
// the tag faults, a provider whose environment names the point in PKVM_FAULT_KILL_AT
// ("name" for its first reach, "name#N" for its Nth) SIGKILLs itself there, so that the
// suite can stop it between any two steps of creating or deleting a resource and check that a
// restarted provider finishes or cleans up what the dead one left.
//
// Point names are "<kind>.<step>", e.g. "baseimage.claim-written"; Points lists them all.
package faultpoint

import (
	"strconv"
	"strings"
)

// EnvKillAt is the environment variable naming the point to die at.
const EnvKillAt = "PKVM_FAULT_KILL_AT"

// The named points, in the order a create or a delete reaches them.
const (
	BaseOwnerWritten  = "baseimage.owner-written"
	BaseClaimWritten  = "baseimage.claim-written"
	BaseDataCreated   = "baseimage.data-created"
	BaseMidUpload     = "baseimage.mid-upload"
	BaseUploaded      = "baseimage.uploaded"
	BaseMarkerWritten = "baseimage.marker-written"
	BaseRemoveClaim   = "baseimage.remove.claim-written"
	BaseRemoveMarker  = "baseimage.remove.marker-deleted"
	BaseRemoveDeleted = "baseimage.remove.deleted" // after each of data, owner record, claim

	SeedRecordWritten = "seedvolume.record-written"
	SeedVolumeCreated = "seedvolume.volume-created"
	SeedUploaded      = "seedvolume.uploaded"
	SeedDeleteVolume  = "seedvolume.delete.volume-deleted"

	DomainOverlayRecord  = "kvmdomain.overlay-record-written"
	DomainOverlayCreated = "kvmdomain.overlay-created"
	DomainDefined        = "kvmdomain.defined"
	DomainStarted        = "kvmdomain.started"
	DomainPowerOff       = "kvmdomain.delete.power-off" // asked to shut down, or destroyed
	DomainUndefined      = "kvmdomain.delete.undefined"
	DomainOverlayDeleted = "kvmdomain.delete.overlay-deleted"
)

// Points are all named points.
var Points = []string{
	BaseOwnerWritten, BaseClaimWritten, BaseDataCreated, BaseMidUpload, BaseUploaded, BaseMarkerWritten,
	BaseRemoveClaim, BaseRemoveMarker, BaseRemoveDeleted,
	SeedRecordWritten, SeedVolumeCreated, SeedUploaded, SeedDeleteVolume,
	DomainOverlayRecord, DomainOverlayCreated, DomainDefined, DomainStarted,
	DomainPowerOff, DomainUndefined, DomainOverlayDeleted,
}

// Target is a parsed PKVM_FAULT_KILL_AT: die at the Nth reach of Name.
type Target struct {
	Name string
	N    int
}

// Parse reads "name" or "name#N" (N >= 1); the empty string is no target.
func Parse(s string) (Target, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Target{}, false
	}
	name, count, found := strings.Cut(s, "#")
	if !found {
		return Target{Name: name, N: 1}, name != ""
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 || name == "" {
		return Target{}, false
	}
	return Target{Name: name, N: n}, true
}
