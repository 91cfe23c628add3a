// Package hostinspect is the tests' own view of the libvirt hosts of a test bed: what is
// defined and stored there, read over libvirtd's local socket (not the provider's SSH
// connection), and removal of what a test left. The e2e and the fault suite count leftovers
// with it.
package hostinspect

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
	"libvirt.org/go/libvirtxml"
)

// libvirtLib is /var/lib/libvirt as libvirtd sees it; NVRAM paths in domain XML start there.
const libvirtLib = "/var/lib/libvirt"

// Host is a test's own view of one libvirt host's libvirtd: its socket on this machine's
// filesystem, not the provider's SSH connection. A connection that libvirtd dropped (a
// restart) is dialed again.
type Host struct {
	mu sync.Mutex
	l  *libvirt.Libvirt

	Name   string // its ClusterProviderConfig
	Socket string // libvirtd's socket on this machine's filesystem
	URI    string // qemu:///system
	Pool   string // the pool the provider's volumes are in
	LibDir string // /var/lib/libvirt as this machine's filesystem shows it ("": the same)
	LogDir string // /var/log/libvirt likewise
	// PoolDir, when set, is the pool's directory on this machine: Matching then also lists
	// the files there that libvirt does not list as volumes (Kind "file").
	PoolDir string
}

// Dial connects to the host's libvirtd once, to fail early when it cannot be reached.
func (h *Host) Dial() error {
	if err := h.call(func(*libvirt.Libvirt) error { return nil }); err != nil {
		return fmt.Errorf("host %s: %w", h.Name, err)
	}
	return nil
}

// Hosts are all hosts of a test bed; the objects they list name their host.
type Hosts []*Host

// Dial connects to every host; on an error it closes those it reached.
func Dial(list []*Host) (Hosts, error) {
	if len(list) == 0 {
		return nil, errors.New("no libvirt host configured")
	}
	var hs Hosts
	for _, h := range list {
		if err := h.Dial(); err != nil {
			hs.Close()
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, nil
}

func (hs Hosts) Close() {
	for _, h := range hs {
		h.Close()
	}
}

// Get is the host of that ClusterProviderConfig (nil if none).
func (hs Hosts) Get(name string) *Host {
	for _, h := range hs {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// First is the first host (the NAT test bed's only one).
func (hs Hosts) First() *Host { return hs[0] }

// BaseVolumes are every host's pkvm-* volumes, as "host/volume".
func (hs Hosts) BaseVolumes() (map[string]bool, error) {
	out := map[string]bool{}
	for _, h := range hs {
		vs, err := h.BaseVolumes()
		if err != nil {
			return nil, err
		}
		for v := range vs {
			out[h.Name+"/"+v] = true
		}
	}
	return out, nil
}

// Leftovers is what any host holds of these namespaces (see Host.Leftovers); keep holds
// "host/volume" names.
func (hs Hosts) Leftovers(namespaces []string, keep map[string]bool) ([]Object, error) {
	var out []Object
	for _, h := range hs {
		left, err := h.Leftovers(namespaces, keep)
		if err != nil {
			return nil, err
		}
		out = append(out, left...)
	}
	return out, nil
}

// DomainObjects finds the host that defines the domain and lists its objects there.
func (hs Hosts) DomainObjects(name string) ([]Object, error) {
	for _, h := range hs {
		ds, err := h.Domains()
		if err != nil {
			return nil, err
		}
		if ds[name] {
			return h.DomainObjects(name)
		}
	}
	return nil, fmt.Errorf("domain %s is defined on none of the Hosts", name)
}

// Present returns those of objs that still exist on their host.
func (hs Hosts) Present(objs []Object) ([]Object, error) {
	var out []Object
	for _, h := range hs {
		mine := h.own(objs)
		if len(mine) == 0 {
			continue
		}
		left, err := h.Present(mine)
		if err != nil {
			return nil, err
		}
		out = append(out, left...)
	}
	return out, nil
}

// Remove removes each object on its host.
func (hs Hosts) Remove(objs []Object) []error {
	var errs []error
	for _, h := range hs {
		errs = append(errs, h.Remove(h.own(objs))...)
	}
	return errs
}

// own are those of objs that are on this host.
func (h *Host) own(objs []Object) []Object {
	var out []Object
	for _, o := range objs {
		if o.Host == h.Name {
			out = append(out, o)
		}
	}
	return out
}

// Local is a path libvirtd gave (under /var/lib/libvirt) as this machine's filesystem shows it.
func (h *Host) Local(p string) string {
	if rest, ok := strings.CutPrefix(p, libvirtLib); ok && h.LibDir != "" {
		return h.LibDir + rest
	}
	return p
}

func (h *Host) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.l != nil {
		_ = h.l.Disconnect()
		h.l = nil
	}
}

// call runs f on a live connection. When f fails without an answer from libvirtd (the
// connection went away: libvirtd restarted), it dials again and runs f once more.
func (h *Host) call(f func(*libvirt.Libvirt) error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for try := 0; ; try++ {
		if h.l == nil || !h.l.IsConnected() {
			l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(h.Socket), dialers.WithLocalTimeout(10*time.Second)))
			if err := l.ConnectToURI(libvirt.ConnectURI(h.URI)); err != nil {
				return fmt.Errorf("libvirt at %s: %w", h.Socket, err)
			}
			h.l = l
		}
		err := f(h.l)
		var answer libvirt.Error
		if err == nil || try > 0 || errors.As(err, &answer) {
			return err
		}
		_ = h.l.Disconnect()
		h.l = nil
	}
}

// Object is a domain, a volume of its host's pool, or an NVRAM file or a pool file libvirt
// does not list (Kind "nvram", "file": a path on this machine).
type Object struct{ Host, Kind, Name string }

func (o Object) String() string { return o.Host + ": " + o.Kind + " " + o.Name }

func List(objs []Object) string {
	s := make([]string, len(objs))
	for i, o := range objs {
		s[i] = o.String()
	}
	return strings.Join(s, ", ")
}

// Domains is the set of defined domain names.
func (h *Host) Domains() (map[string]bool, error) {
	var ds []libvirt.Domain
	err := h.call(func(l *libvirt.Libvirt) (err error) {
		ds, _, err = l.ConnectListAllDomains(1, libvirt.ConnectListDomainsActive|libvirt.ConnectListDomainsInactive)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing domains: %w", err)
	}
	out := map[string]bool{}
	for _, d := range ds {
		out[d.Name] = true
	}
	return out, nil
}

// Volumes is the set of volume names in the host's pool.
func (h *Host) Volumes() (map[string]bool, error) {
	var vs []libvirt.StorageVol
	err := h.call(func(l *libvirt.Libvirt) error {
		p, err := l.StoragePoolLookupByName(h.Pool)
		if err == nil {
			vs, _, err = l.StoragePoolListAllVolumes(p, 1, 0)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing the volumes of pool %s: %w", h.Pool, err)
	}
	out := map[string]bool{}
	for _, v := range vs {
		out[v.Name] = true
	}
	return out, nil
}

// BaseVolumes are the BaseImages' volumes on the host (pkvm-base-*; their claim and marker
// volumes are pkvm-* too).
func (h *Host) BaseVolumes() (map[string]bool, error) {
	vs, err := h.Volumes()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for v := range vs {
		if strings.HasPrefix(v, "pkvm-") {
			out[v] = true
		}
	}
	return out, nil
}

// Leftovers lists what the host holds of these namespaces (domains and volumes named
// <ns>_..., NVRAM files <ns>_...) and every pkvm-* volume not in keep ("host/volume").
func (h *Host) Leftovers(namespaces []string, keep map[string]bool) ([]Object, error) {
	return h.Matching(InNamespaces(namespaces), func(v string) bool { return strings.HasPrefix(v, "pkvm-") && !keep[h.Name+"/"+v] })
}

// InNamespaces matches the names the provider derives for objects of these namespaces.
func InNamespaces(namespaces []string) func(string) bool {
	return func(name string) bool {
		for _, ns := range namespaces {
			if strings.HasPrefix(name, ns+"_") {
				return true
			}
		}
		return false
	}
}

// Matching lists the host's domains, volumes of its pool and NVRAM files whose names ours
// matches, and the volumes that alsoVolumes matches (nil: none).
func (h *Host) Matching(ours, alsoVolumes func(string) bool) ([]Object, error) {
	if alsoVolumes == nil {
		alsoVolumes = func(string) bool { return false }
	}
	vol := func(n string) bool { return ours(n) || alsoVolumes(n) }
	ds, err := h.Domains()
	if err != nil {
		return nil, err
	}
	vs, err := h.Volumes()
	if err != nil {
		return nil, err
	}
	out := h.named("domain", sortedKeys(ds), ours, "")
	out = append(out, h.named("volume", sortedKeys(vs), vol, "")...)
	if h.PoolDir != "" {
		files, err := dirNames(h.PoolDir)
		if err != nil {
			return nil, fmt.Errorf("listing the pool directory %s: %w", h.PoolDir, err)
		}
		unlisted := func(n string) bool { return !vs[n] && vol(n) }
		out = append(out, h.named("file", files, unlisted, h.PoolDir)...)
	}
	nvramDir := h.Local(libvirtLib + "/qemu/nvram")
	nvram, _ := dirNames(nvramDir)
	return append(out, h.named("nvram", nvram, ours, nvramDir)...), nil
}

// named are the objects of kind among names that match; dir, when set, makes their names
// paths in it.
func (h *Host) named(kind string, names []string, match func(string) bool, dir string) []Object {
	var out []Object
	for _, n := range names {
		if !match(n) {
			continue
		}
		if dir != "" {
			n = filepath.Join(dir, n)
		}
		out = append(out, Object{h.Name, kind, n})
	}
	return out
}

// dirNames are the names in dir; a directory that does not exist has none.
func dirNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	out := make([]string, 0, len(ents))
	for _, en := range ents {
		out = append(out, en.Name())
	}
	return out, nil
}

// DomainXML is a domain's definition.
func (h *Host) DomainXML(name string) (*libvirtxml.Domain, error) {
	var x string
	err := h.call(func(l *libvirt.Libvirt) error {
		d, err := l.DomainLookupByName(name)
		if err == nil {
			x, err = l.DomainGetXMLDesc(d, 0)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("domain %s on host %s: %w", name, h.Name, err)
	}
	dom := &libvirtxml.Domain{}
	if err := dom.Unmarshal(x); err != nil {
		return nil, fmt.Errorf("domain %s: %w", name, err)
	}
	return dom, nil
}

// DomainObjects are a domain's volumes (overlay, seed) and NVRAM file, read from its
// definition while it exists, and the domain itself.
func (h *Host) DomainObjects(name string) ([]Object, error) {
	dom, err := h.DomainXML(name)
	if err != nil {
		return nil, err
	}
	var out []Object
	if dom.Devices != nil {
		for _, disk := range dom.Devices.Disks {
			if disk.Source != nil && disk.Source.Volume != nil {
				out = append(out, Object{h.Name, "volume", disk.Source.Volume.Volume})
			}
		}
	}
	if dom.OS != nil && dom.OS.NVRam != nil && dom.OS.NVRam.NVRam != "" {
		out = append(out, Object{h.Name, "nvram", h.Local(dom.OS.NVRam.NVRam)})
	}
	return append(out, Object{h.Name, "domain", name}), nil
}

// Present returns those of objs that still exist.
func (h *Host) Present(objs []Object) ([]Object, error) {
	ds, err := h.Domains()
	if err != nil {
		return nil, err
	}
	vs, err := h.Volumes()
	if err != nil {
		return nil, err
	}
	var out []Object
	for _, o := range objs {
		switch o.Kind {
		case "domain":
			if ds[o.Name] {
				out = append(out, o)
			}
		case "volume":
			if vs[o.Name] {
				out = append(out, o)
			}
		case "nvram", "file":
			if _, err := os.Stat(o.Name); err == nil {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// Define defines a domain from its XML, as virsh define would: a domain made by hand.
func (h *Host) Define(xml string) error {
	return h.call(func(l *libvirt.Libvirt) error {
		_, err := l.DomainDefineXML(xml)
		return err
	})
}

// Remove destroys and undefines the domains, deletes the volumes and files: only for what
// deleting through Kubernetes did not remove (or could not, without a provider).
func (h *Host) Remove(objs []Object) []error {
	var errs []error
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].Kind == "domain" && objs[j].Kind != "domain" })
	for _, o := range objs {
		var err error
		switch o.Kind {
		case "domain":
			err = h.call(func(l *libvirt.Libvirt) error {
				d, err := l.DomainLookupByName(o.Name)
				if err != nil {
					return err
				}
				_ = l.DomainDestroy(d)
				if err := l.DomainUndefineFlags(d, libvirt.DomainUndefineNvram); err != nil {
					return l.DomainUndefineFlags(d, 0)
				}
				return nil
			})
		case "volume":
			err = h.call(func(l *libvirt.Libvirt) error {
				p, err := l.StoragePoolLookupByName(h.Pool)
				if err != nil {
					return err
				}
				v, err := l.StorageVolLookupByName(p, o.Name)
				if err != nil {
					return err
				}
				return l.StorageVolDelete(v, libvirt.StorageVolDeleteNormal)
			})
		case "nvram", "file":
			err = os.Remove(o.Name)
			if os.IsNotExist(err) {
				err = nil
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", o, err))
		}
	}
	return errs
}

// BridgeIP is the first IPv4 address of the libvirt network (the guests' gateway, where the
// 204 origin listens) and the network it is on, as a CIDR.
func (h *Host) BridgeIP(network string) (ip, cidr string, err error) {
	var x string
	err = h.call(func(l *libvirt.Libvirt) error {
		n, err := l.NetworkLookupByName(network)
		if err == nil {
			x, err = l.NetworkGetXMLDesc(n, 0)
		}
		return err
	})
	if err != nil {
		return "", "", fmt.Errorf("libvirt network %s: %w", network, err)
	}
	var nx libvirtxml.Network
	if err := nx.Unmarshal(x); err != nil {
		return "", "", err
	}
	for _, a := range nx.IPs {
		if a.Family != "" && a.Family != "ipv4" {
			continue
		}
		bits := int(a.Prefix)
		if a.Netmask != "" {
			if m := net.ParseIP(a.Netmask).To4(); m != nil {
				bits, _ = net.IPv4Mask(m[0], m[1], m[2], m[3]).Size()
			}
		}
		if bits == 0 {
			bits = 24
		}
		p, err := netip.ParsePrefix(fmt.Sprintf("%s/%d", a.Address, bits))
		if err != nil {
			return "", "", fmt.Errorf("libvirt network %s: %w", network, err)
		}
		return a.Address, p.Masked().String(), nil
	}
	return "", "", fmt.Errorf("libvirt network %s has no IPv4 address", network)
}

// LeaseIP is the IPv4 address libvirt's DHCP leases give the domain, "" while it has none.
func (h *Host) LeaseIP(domain string) string {
	ip := ""
	_ = h.call(func(l *libvirt.Libvirt) error {
		d, err := l.DomainLookupByName(domain)
		if err != nil {
			return err
		}
		ifs, err := l.DomainInterfaceAddresses(d, uint32(libvirt.DomainInterfaceAddressesSrcLease), 0)
		if err != nil {
			return err
		}
		for _, i := range ifs {
			for _, a := range i.Addrs {
				if a.Type == int32(libvirt.IPAddrTypeIpv4) {
					ip = a.Addr
				}
			}
		}
		return nil
	})
	return ip
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
