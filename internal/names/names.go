// Package names derives the names of the libvirt objects a managed resource owns. They are
// pure functions of the resource's namespace, name and UID, so a provider that restarts with
// empty status finds the same objects again, and objects of two resources never collide.
//
// Kubernetes names never contain '_', so "<namespace>_<name>" is unambiguous on a host shared
// by many namespaces. The UID prefix tells a resource from an earlier one of the same name.
package names

import "strings"

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

// SeedVolume is the storage volume name of a SeedVolume's ISO.
func SeedVolume(namespace, name, uid string) string {
	return namespace + "_" + name + "-" + uidPrefix(uid) + ".seed.iso"
}

// Overlay is the storage volume name of a KVMDomain's root disk overlay.
func Overlay(namespace, name, uid string) string {
	return namespace + "_" + name + "-" + uidPrefix(uid) + ".root.qcow2"
}

// InstanceID is the default cloud-init instance-id of a SeedVolume: stable for the life of the
// resource, new for a new resource of the same name.
func InstanceID(uid string) string { return "i-" + strings.ReplaceAll(uid, "-", "") }
