// Package names derives the names of the libvirt objects a managed resource owns. They are
// pure functions of the resource's namespace, name and UID, so a provider that restarts with
// empty status finds the same objects again, and objects of two resources never collide.
//
// Kubernetes names never contain '_', so "<namespace>_<name>" is unambiguous on a host shared
// by many namespaces. The UID prefix tells a resource from an earlier one of the same name.
package names

import (
	"strconv"
	"strings"
)

// uidPrefix is enough of a UID to tell a deleted-and-recreated resource from its predecessor.
func uidPrefix(uid string) string {
	u := strings.ReplaceAll(uid, "-", "")
	if len(u) > 8 {
		u = u[:8]
	}
	return u
}

// Domain is the libvirt domain name of a KVMDomain.
func Domain(namespace, name string) string { return namespace + "_" + name }

// SeedVolume is the SeedVolume's stable name on the host (its external name), and the name of
// its ISO volume in releases that rewrote seeds in place.
func SeedVolume(namespace, name, uid string) string {
	return seedStem(namespace, name, uid) + seedSuffix
}

const (
	seedSuffix    = ".seed.iso"
	seedDigestLen = 16 // hex digits of the ISO's sha256 in a seed volume's name
)

func seedStem(namespace, name, uid string) string {
	return namespace + "_" + name + "-" + uidPrefix(uid)
}

// SeedContent is the storage volume of a SeedVolume's ISO whose sha256 is isoSHA256 (64 hex
// digits): every content gets a volume of its own, so a changed seed never overwrites the one
// a guest reads. It returns "" for a digest that is not 64 lowercase hex digits.
func SeedContent(namespace, name, uid, isoSHA256 string) string {
	if !isHex(isoSHA256, 64) {
		return ""
	}
	return seedStem(namespace, name, uid) + "-" + isoSHA256[:seedDigestLen] + seedSuffix
}

// IsSeedVolumeOf tells whether vol is one of the SeedVolume's volumes: SeedContent of some
// digest, or the SeedVolume name of releases before.
func IsSeedVolumeOf(vol, namespace, name, uid string) bool {
	stem := seedStem(namespace, name, uid)
	if vol == stem+seedSuffix {
		return true
	}
	d, ok := strings.CutPrefix(vol, stem+"-")
	if !ok {
		return false
	}
	d, ok = strings.CutSuffix(d, seedSuffix)
	return ok && isHex(d, seedDigestLen)
}

// isHex is true when s is n lowercase hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Overlay is the storage volume name of a KVMDomain's root disk overlay.
func Overlay(namespace, name, uid string) string {
	return namespace + "_" + name + "-" + uidPrefix(uid) + ".root.qcow2"
}

// InstanceID is the default cloud-init instance-id of a SeedVolume: stable for the life of the
// resource, new for a new resource of the same name.
func InstanceID(uid string) string { return "i-" + strings.ReplaceAll(uid, "-", "") }

// MaxNamespaceAndName is the longest namespace plus name whose derived names fit a file name
// (255 bytes) on the host: the longest is a seed content volume's ownership record,
// "<namespace>_<name>-<8>-<16>.seed.iso.owner", 42 bytes more than namespace and name.
// Admission bounds metadata.name to 150 characters, which with a namespace of at most 63 fits.
const MaxNamespaceAndName = 255 - 42

// CheckLength refuses a namespace and name whose derived names would not fit a file name on
// the host (libvirt would fail with ENAMETOOLONG), for resources admitted before the rule.
func CheckLength(namespace, name string) error {
	if n := len(namespace) + len(name); n > MaxNamespaceAndName {
		return lengthError{n: n}
	}
	return nil
}

type lengthError struct{ n int }

func (e lengthError) Error() string {
	return "namespace and name together are " + strconv.Itoa(e.n) + " characters, more than the " + strconv.Itoa(MaxNamespaceAndName) +
		" the names of its files on the host allow (a file name has at most 255 bytes): create it with a shorter name; nothing was made on the host"
}
