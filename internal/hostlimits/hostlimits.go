// Package hostlimits decides what a host config's limits (spec.limits) allow: the size of a
// domain and of an image, how many domains and images one namespace has on the host, and
// whether a storage pool has room for an upload or a new overlay. It also tells a failure for
// want of space (ENOSPC) from others, and whether a guest that QEMU paused on an I/O error may
// be resumed. Its decisions are pure: callers read the host and act.
//
// Messages name the limit, its value and the config; never another namespace's objects.
package hostlimits

import (
	"fmt"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
)

// Limits are a config's spec.limits and the name of the config, e.g.
// "ClusterProviderConfig/default", for messages. A zero cap does not limit.
type Limits struct {
	v1alpha1.HostLimits
	Source string
}

// An ExceededError says a request is over a cap of the host config. Nothing was made on the
// host for it.
type ExceededError struct {
	// What was asked, as the resource's field names it, e.g. "memoryMiB".
	What string
	// Field of spec.limits that caps it, e.g. "maxMemoryMiB".
	Field string
	// Asked and Max, in the unit of Field.
	Asked, Max int64
	// Source names the config.
	Source string
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("%s %d exceeds limits.%s %d of %s: nothing was made on the host; ask for less, or ask the platform team to raise the limit",
		e.What, e.Asked, e.Field, e.Max, e.Source)
}

// IsExceeded is true when err is an *ExceededError.
func IsExceeded(err error) bool {
	var e *ExceededError
	return errors.As(err, &e)
}

func check(what, field string, asked, maxv int64, source string) error {
	if maxv <= 0 || asked <= maxv {
		return nil
	}
	return &ExceededError{What: what, Field: field, Asked: asked, Max: maxv, Source: source}
}

const gib = 1 << 30

// ceilGiB is n bytes in GiB, rounded up.
func ceilGiB(n uint64) int64 { return int64((n + gib - 1) / gib) }

// Domain checks a new domain's size: vcpu, memory and the capacity of its root disk (the
// larger of diskSizeGiB and its base image's virtual size).
func (l Limits) Domain(vcpu, memoryMiB int64, diskBytes uint64) error {
	if err := check("vcpu", "maxVCPU", vcpu, int64(l.MaxVCPU), l.Source); err != nil {
		return err
	}
	if err := check("memoryMiB", "maxMemoryMiB", memoryMiB, l.MaxMemoryMiB, l.Source); err != nil {
		return err
	}
	return check("root disk GiB", "maxDiskSizeGiB", ceilGiB(diskBytes), l.MaxDiskSizeGiB, l.Source)
}

// DomainCount checks that a namespace that has have domains on the host may have one more.
func (l Limits) DomainCount(have int) error {
	return check("domains of this namespace on the host, with this one,", "maxDomainsPerNamespace", int64(have)+1, int64(l.MaxDomainsPerNamespace), l.Source)
}

// ImageCount checks that a namespace whose BaseImages hold have images on the host may hold
// one more.
func (l Limits) ImageCount(have int) error {
	return check("images of this namespace on the host, with this one,", "maxImagesPerNamespace", int64(have)+1, int64(l.MaxImagesPerNamespace), l.Source)
}

// MaxVirtualBytes is the largest virtual size of an image, 0 when unlimited.
func (l Limits) MaxVirtualBytes() int64 { return l.MaxVirtualSizeGiB * gib }

// MarginBytes is the free space a pool keeps.
func (l Limits) MarginBytes() uint64 { return uint64(max(l.MinFreePoolMiB, 0)) << 20 }

// CountDomains counts the domains among defs (domain XML documents) whose ownership mark
// names namespace, leaving out the one of uid (the domain being created, if an earlier
// attempt defined it). Domains without a mark are nobody's.
func CountDomains(defs []string, namespace, uid string) (int, error) {
	n := 0
	for _, d := range defs {
		o, err := domainxml.OwnerOf(d)
		if err != nil {
			return 0, err
		}
		if o != nil && o.Namespace == namespace && o.UID != uid {
			n++
		}
	}
	return n, nil
}

// A PoolFullError says a storage pool has no room for what was to be written into it: a
// check before the write found too little free space (Need > 0), or the write failed with
// ENOSPC (Cause). What the write had made was removed. Retrying soon only fills the pool
// again: it is tried again after a long pause, and only once the pool has room.
type PoolFullError struct {
	Pool string
	// Available is the pool's free space; Need what the write needs, margin included (both 0
	// when the write itself ran out of space).
	Available, Need uint64
	// Source names the config whose limits.minFreePoolMiB applies.
	Source string
	// Cause is the write's error (ENOSPC), nil for a refusal before it.
	Cause error
}

func (e *PoolFullError) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("storage pool %s is full: what was written is removed, and it is tried again only once the pool has room: %v", e.Pool, e.Cause)
	}
	return fmt.Sprintf("storage pool %s has %d MiB free, but %d MiB are needed (limits.minFreePoolMiB of %s included): nothing was written; it is tried again once the pool has room",
		e.Pool, e.Available>>20, (e.Need+(1<<20)-1)>>20, e.Source)
}

func (e *PoolFullError) Unwrap() error { return e.Cause }

// IsPoolFull is true when err is a *PoolFullError.
func IsPoolFull(err error) bool {
	var e *PoolFullError
	return errors.As(err, &e)
}

// Room checks that a pool with available bytes free has room for need bytes (at least one:
// a size not announced, or a new overlay, still needs some) and the margin besides.
func (l Limits) Room(pool string, available, need uint64) error {
	total := max(need, 1) + l.MarginBytes()
	if available >= total {
		return nil
	}
	return &PoolFullError{Pool: pool, Available: available, Need: total, Source: l.Source}
}

// noSpace is how libvirt and QEMU word ENOSPC.
const noSpace = "no space left on device"

// IsNoSpace is true when err (or what it wraps) says the device is full: ENOSPC as libvirt
// passes on the message of the failed write.
func IsNoSpace(err error) bool {
	return err != nil && (IsPoolFull(err) || strings.Contains(strings.ToLower(err.Error()), noSpace))
}

// Why a domain is paused, as the provider tells them apart.
type PauseReason string

// Pause reasons.
const (
	// PausedIOError: QEMU paused the guest because a write to its disk failed (ENOSPC on a
	// full pool, typically); it resumes only when told to.
	PausedIOError PauseReason = "IOError"
	// PausedOther: any other reason (the user's virsh suspend, a migration, a snapshot...).
	PausedOther PauseReason = "Other"
)

// Resume decides whether a paused domain is resumed: only one QEMU paused on an I/O error,
// whose resource wants it running, and only once its pool has the margin free again (else
// the guest's next write pauses it again). A guest paused for any other reason is left alone.
func (l Limits) Resume(reason PauseReason, wantRunning bool, poolAvailable uint64) bool {
	return reason == PausedIOError && wantRunning && poolAvailable >= max(l.MarginBytes(), 1)
}
