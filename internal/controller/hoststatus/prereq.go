package hoststatus

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"golang.org/x/crypto/ssh"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// MinLibvirt is the oldest libvirt the provider supports: UEFI guests (the default firmware)
// ask libvirt to choose firmware without secure boot and enrolled keys, which libvirt knows
// from 7.2.0 on; older libvirt refuses every such definition.
var MinLibvirt = [3]int{7, 2, 0}

// PrerequisiteError names what a host lacks that the provider needs, and how to add it.
type PrerequisiteError struct {
	// What is missing, by name: "libvirt 7.2.0", "storage pool default", ...
	What string
	// Fix says what to do on the host.
	Fix string
}

func (e *PrerequisiteError) Error() string { return "missing on the host: " + e.What + ": " + e.Fix }

// Missing is the first prerequisite a successful read shows missing, checked on what the read
// took anyway (no call of its own): the libvirt version, and the config's default pool.
func Missing(hs *v1alpha1.HostStatus, defaultPool string) error {
	if hs == nil {
		return nil
	}
	if v, ok := parseVersion(hs.LibvirtVersion); ok && less(v, MinLibvirt) {
		return &PrerequisiteError{What: fmt.Sprintf("libvirt %d.%d.%d", MinLibvirt[0], MinLibvirt[1], MinLibvirt[2]),
			Fix: "the host runs libvirt " + hs.LibvirtVersion + ", which cannot define UEFI guests with firmware features; upgrade libvirt"}
	}
	if defaultPool == "" {
		defaultPool = "default"
	}
	for _, p := range hs.Pools {
		if p.Name != defaultPool {
			continue
		}
		switch {
		case p.Missing:
			return &PrerequisiteError{What: "storage pool " + defaultPool,
				Fix: "no such pool: define it (virsh pool-define-as " + defaultPool + " dir --target /var/lib/libvirt/images), then start it and mark it autostart, or set spec.defaults.pool to an existing pool"}
		case !p.Active:
			return &PrerequisiteError{What: "active storage pool " + defaultPool,
				Fix: "the pool is not active: virsh pool-start " + defaultPool + " && virsh pool-autostart " + defaultPool}
		}
	}
	return nil
}

// forwardingRefused turns sshd's refusal of the channel the provider opens to libvirt's socket
// into the prerequisite it names.
func forwardingRefused(err error) error {
	var oc *ssh.OpenChannelError
	if !errors.As(err, &oc) && !strings.Contains(err.Error(), "administratively prohibited") {
		return nil
	}
	if oc != nil && oc.Reason != ssh.Prohibited {
		return nil
	}
	return &PrerequisiteError{What: "SSH stream-local forwarding",
		Fix: "sshd refused to forward to libvirt's socket (" + err.Error() + "): set AllowStreamLocalForwarding yes (and AllowTcpForwarding yes, which readiness probes need) for the provider's user in sshd_config"}
}

func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}
