//go:build e2e

package e2e

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

// host is the test's own view of one libvirt host's libvirtd: its socket on this machine's
// filesystem, not the provider's SSH connection. A connection that libvirtd dropped (a
// restart) is dialed again.
type host struct {
	mu                sync.Mutex
	l                 *libvirt.Libvirt
	name              string // its ClusterProviderConfig
	socket, uri, pool string
	libDir            string // /var/lib/libvirt as this machine's filesystem shows it
	logDir            string // /var/log/libvirt likewise
}

func dialOne(cfg config, hc hostConfig) (*host, error) {
	h := &host{name: hc.Name, socket: hc.Socket, uri: cfg.LibvirtURI, pool: hc.Pool, libDir: hc.LibDir, logDir: hc.LogDir}
	if err := h.call(func(*libvirt.Libvirt) error { return nil }); err != nil {
		return nil, fmt.Errorf("host %s: %w", hc.Name, err)
	}
	return h, nil
}

// hosts are all hosts of the topology; the objects they list name their host.
type hosts []*host

// dialHosts connects to every host of the topology.
func dialHosts(cfg config) (hosts, error) {
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("no libvirt host configured (TESTBED_* or LAN_* variables missing)")
	}
	var hs hosts
	for _, hc := range cfg.Hosts {
		h, err := dialOne(cfg, hc)
		if err != nil {
			hs.close()
			return nil, err
		}
		hs = append(hs, h)
	}
	return hs, nil
}

func (hs hosts) close() {
	for _, h := range hs {
		h.close()
	}
}

// get is the host of that ClusterProviderConfig (nil if none).
func (hs hosts) get(name string) *host {
	for _, h := range hs {
		if h.name == name {
			return h
		}
	}
	return nil
}

// first is the first host (the NAT test bed's only one).
func (hs hosts) first() *host { return hs[0] }

// baseVolumes are every host's pkvm-* volumes, as "host/volume".
func (hs hosts) baseVolumes() (map[string]bool, error) {
	out := map[string]bool{}
	for _, h := range hs {
		vs, err := h.baseVolumes()
		if err != nil {
			return nil, err
		}
		for v := range vs {
			out[h.name+"/"+v] = true
		}
	}
	return out, nil
}

// leftovers is what any host holds of these namespaces (see host.leftovers); keep holds
// "host/volume" names.
func (hs hosts) leftovers(namespaces []string, keep map[string]bool) ([]object, error) {
	var out []object
	for _, h := range hs {
		left, err := h.leftovers(namespaces, keep)
		if err != nil {
			return nil, err
		}
		out = append(out, left...)
	}
	return out, nil
}

// domainObjects finds the host that defines the domain and lists its objects there.
func (hs hosts) domainObjects(name string) ([]object, error) {
	for _, h := range hs {
		ds, err := h.domains()
		if err != nil {
			return nil, err
		}
		if ds[name] {
			return h.domainObjects(name)
		}
	}
	return nil, fmt.Errorf("domain %s is defined on none of the hosts", name)
}

// present returns those of objs that still exist on their host.
func (hs hosts) present(objs []object) ([]object, error) {
	var out []object
	for _, h := range hs {
		mine := h.own(objs)
		if len(mine) == 0 {
			continue
		}
		left, err := h.present(mine)
		if err != nil {
			return nil, err
		}
		out = append(out, left...)
	}
	return out, nil
}

// remove removes each object on its host.
func (hs hosts) remove(objs []object) []error {
	var errs []error
	for _, h := range hs {
		errs = append(errs, h.remove(h.own(objs))...)
	}
	return errs
}

// own are those of objs that are on this host.
func (h *host) own(objs []object) []object {
	var out []object
	for _, o := range objs {
		if o.Host == h.name {
			out = append(out, o)
		}
	}
	return out
}

// local is a path libvirtd gave (under /var/lib/libvirt) as this machine's filesystem shows it.
func (h *host) local(p string) string {
	if rest, ok := strings.CutPrefix(p, libvirtLib); ok && h.libDir != "" {
		return h.libDir + rest
	}
	return p
}

func (h *host) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.l != nil {
		_ = h.l.Disconnect()
		h.l = nil
	}
}

// call runs f on a live connection. When f fails without an answer from libvirtd (the
// connection went away: libvirtd restarted), it dials again and runs f once more.
func (h *host) call(f func(*libvirt.Libvirt) error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for try := 0; ; try++ {
		if h.l == nil || !h.l.IsConnected() {
			l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(h.socket), dialers.WithLocalTimeout(10*time.Second)))
			if err := l.ConnectToURI(libvirt.ConnectURI(h.uri)); err != nil {
				return fmt.Errorf("libvirt at %s: %w", h.socket, err)
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

// object is a domain, a volume of its host's pool or an NVRAM file (a path on this machine).
type object struct{ Host, Kind, Name string }

func (o object) String() string { return o.Host + ": " + o.Kind + " " + o.Name }

func objectList(objs []object) string {
	s := make([]string, len(objs))
	for i, o := range objs {
		s[i] = o.String()
	}
	return strings.Join(s, ", ")
}

// domains is the set of defined domain names.
func (h *host) domains() (map[string]bool, error) {
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

// volumes is the set of volume names in the test bed's pool.
func (h *host) volumes() (map[string]bool, error) {
	var vs []libvirt.StorageVol
	err := h.call(func(l *libvirt.Libvirt) error {
		p, err := l.StoragePoolLookupByName(h.pool)
		if err == nil {
			vs, _, err = l.StoragePoolListAllVolumes(p, 1, 0)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing the volumes of pool %s: %w", h.pool, err)
	}
	out := map[string]bool{}
	for _, v := range vs {
		out[v.Name] = true
	}
	return out, nil
}

// baseVolumes are the BaseImages' volumes on the host (pkvm-base-*; their claim and marker
// volumes are pkvm-* too).
func (h *host) baseVolumes() (map[string]bool, error) {
	vs, err := h.volumes()
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

// leftovers lists what the host holds of these namespaces (domains and volumes named
// <ns>_..., NVRAM files <ns>_...) and every pkvm-* volume not in keep ("host/volume").
func (h *host) leftovers(namespaces []string, keep map[string]bool) ([]object, error) {
	ours := func(name string) bool {
		for _, ns := range namespaces {
			if strings.HasPrefix(name, ns+"_") {
				return true
			}
		}
		return false
	}
	var out []object
	ds, err := h.domains()
	if err != nil {
		return nil, err
	}
	for _, d := range sortedKeys(ds) {
		if ours(d) {
			out = append(out, object{h.name, "domain", d})
		}
	}
	vs, err := h.volumes()
	if err != nil {
		return nil, err
	}
	for _, v := range sortedKeys(vs) {
		if ours(v) || (strings.HasPrefix(v, "pkvm-") && !keep[h.name+"/"+v]) {
			out = append(out, object{h.name, "volume", v})
		}
	}
	nvramDir := h.local(libvirtLib + "/qemu/nvram")
	entries, _ := os.ReadDir(nvramDir)
	for _, en := range entries {
		if ours(en.Name()) {
			out = append(out, object{h.name, "nvram", filepath.Join(nvramDir, en.Name())})
		}
	}
	return out, nil
}

// domainXML is a domain's definition.
func (h *host) domainXML(name string) (*libvirtxml.Domain, error) {
	var x string
	err := h.call(func(l *libvirt.Libvirt) error {
		d, err := l.DomainLookupByName(name)
		if err == nil {
			x, err = l.DomainGetXMLDesc(d, 0)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("domain %s on host %s: %w", name, h.name, err)
	}
	dom := &libvirtxml.Domain{}
	if err := dom.Unmarshal(x); err != nil {
		return nil, fmt.Errorf("domain %s: %w", name, err)
	}
	return dom, nil
}

// domainObjects are a domain's volumes (overlay, seed) and NVRAM file, read from its
// definition while it exists, and the domain itself.
func (h *host) domainObjects(name string) ([]object, error) {
	dom, err := h.domainXML(name)
	if err != nil {
		return nil, err
	}
	var out []object
	if dom.Devices != nil {
		for _, disk := range dom.Devices.Disks {
			if disk.Source != nil && disk.Source.Volume != nil {
				out = append(out, object{h.name, "volume", disk.Source.Volume.Volume})
			}
		}
	}
	if dom.OS != nil && dom.OS.NVRam != nil && dom.OS.NVRam.NVRam != "" {
		out = append(out, object{h.name, "nvram", h.local(dom.OS.NVRam.NVRam)})
	}
	return append(out, object{h.name, "domain", name}), nil
}

// present returns those of objs that still exist.
func (h *host) present(objs []object) ([]object, error) {
	ds, err := h.domains()
	if err != nil {
		return nil, err
	}
	vs, err := h.volumes()
	if err != nil {
		return nil, err
	}
	var out []object
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
		case "nvram":
			if _, err := os.Stat(o.Name); err == nil {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

// remove destroys and undefines the domains, deletes the volumes and files: only for what
// deleting through Kubernetes did not remove (or could not, without a provider).
func (h *host) remove(objs []object) []error {
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
				p, err := l.StoragePoolLookupByName(h.pool)
				if err != nil {
					return err
				}
				v, err := l.StorageVolLookupByName(p, o.Name)
				if err != nil {
					return err
				}
				return l.StorageVolDelete(v, libvirt.StorageVolDeleteNormal)
			})
		case "nvram":
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

// bridgeIP is the first IPv4 address of the libvirt network (the guests' gateway, where the
// 204 origin listens) and the network it is on, as a CIDR.
func (h *host) bridgeIP(network string) (ip, cidr string, err error) {
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

// cleanMain is -e2e.clean: remove what is left of the namespaces (and any base image volume)
// on the test bed, saying what; exit 1 when something could not be removed.
func cleanMain(namespaces []string) int {
	cfg := loadConfig()
	hs, err := dialHosts(cfg)
	if err != nil {
		warnf("%v", err)
		return 1
	}
	defer hs.close()
	left, err := hs.leftovers(namespaces, nil)
	if err != nil {
		warnf("%v", err)
		return 1
	}
	if len(left) == 0 {
		return 0
	}
	warnf("the hosts hold objects of %s (removing them with libvirt calls):\n%s", strings.Join(namespaces, ", "), indent(strings.ReplaceAll(objectList(left), ", ", "\n"), "  "))
	for _, err := range hs.remove(left) {
		warnf("%v", err)
	}
	if left, err = hs.leftovers(namespaces, nil); err != nil || len(left) > 0 {
		warnf("still on the hosts: %s %v", objectList(left), err)
		return 1
	}
	return 0
}
