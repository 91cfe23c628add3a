package kvmdomain

import (
	"context"
	"net/netip"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
)

// fakeHost is an in-memory host: storage from fakestorage, domains in a map, and function
// fields for what a test wants to decide.
type fakeHost struct {
	*fakestorage.Storage
	domains map[string]libvirt.DomainInfo
	calls   []string
	ip      func(name, mac, source string) (string, error)
	// ranges are the libvirt networks' IPv4 ranges, by network name.
	ranges map[string][]netip.Prefix
	// node is the host's size; nil: a host far larger than any test needs.
	node *libvirt.NodeInfo
}

func newFakeHost() *fakeHost {
	return &fakeHost{Storage: fakestorage.New(), domains: map[string]libvirt.DomainInfo{}}
}

func (h *fakeHost) Domain(_ context.Context, name string) (libvirt.DomainInfo, error) {
	h.calls = append(h.calls, "Domain "+name)
	d, ok := h.domains[name]
	if !ok {
		return libvirt.DomainInfo{}, errNoDomain
	}
	return d, nil
}

func (h *fakeHost) DomainIPv4(_ context.Context, name, mac, source string) (string, error) {
	if h.ip == nil {
		return "", errNoDomain
	}
	return h.ip(name, mac, source)
}

func (h *fakeHost) DomainDefinitions(context.Context) ([]string, error) {
	h.calls = append(h.calls, "DomainDefinitions")
	var out []string
	for _, d := range h.domains {
		out = append(out, d.XML)
	}
	return out, nil
}

func (h *fakeHost) NodeInfo(context.Context) (libvirt.NodeInfo, error) {
	if h.node != nil {
		return *h.node, nil
	}
	return libvirt.NodeInfo{CPUs: 64, MemoryBytes: 256 << 30}, nil
}

func (h *fakeHost) NetworkRanges(_ context.Context, name string) ([]netip.Prefix, error) {
	rs, ok := h.ranges[name]
	if !ok {
		return nil, errNoDomain
	}
	return rs, nil
}

func (h *fakeHost) DefineDomain(_ context.Context, x string) error {
	h.calls = append(h.calls, "DefineDomain")
	name := nameOf(x)
	d := h.domains[name]
	d.Name, d.XML, d.InactiveXML = name, x, x
	if d.State == "" {
		d.State = libvirt.StateShutOff
	}
	h.domains[name] = d
	return nil
}

func (h *fakeHost) set(name string, fn func(*libvirt.DomainInfo)) error {
	d, ok := h.domains[name]
	if !ok {
		return errNoDomain
	}
	fn(&d)
	h.domains[name] = d
	return nil
}

func (h *fakeHost) SetAutostart(_ context.Context, name string, on bool) error {
	h.calls = append(h.calls, "SetAutostart "+name)
	return h.set(name, func(d *libvirt.DomainInfo) { d.Autostart = on })
}
func (h *fakeHost) StartDomain(_ context.Context, name string) error {
	h.calls = append(h.calls, "StartDomain "+name)
	return h.set(name, func(d *libvirt.DomainInfo) { d.State = libvirt.StateRunning })
}
func (h *fakeHost) ShutdownDomain(_ context.Context, name string) error {
	h.calls = append(h.calls, "ShutdownDomain "+name)
	return h.set(name, func(*libvirt.DomainInfo) {})
}
func (h *fakeHost) DestroyDomain(_ context.Context, name string) error {
	h.calls = append(h.calls, "DestroyDomain "+name)
	return h.set(name, func(d *libvirt.DomainInfo) { d.State = libvirt.StateShutOff })
}
func (h *fakeHost) UndefineDomain(_ context.Context, name string) error {
	h.calls = append(h.calls, "UndefineDomain "+name)
	if _, ok := h.domains[name]; !ok {
		return errNoDomain
	}
	delete(h.domains, name)
	return nil
}
func (h *fakeHost) BlockResize(_ context.Context, name, path string, size uint64) error {
	h.calls = append(h.calls, "BlockResize "+name)
	return nil
}

func (h *fakeHost) ChangeMedia(_ context.Context, name, diskXML string) error {
	h.calls = append(h.calls, "ChangeMedia "+name)
	return h.set(name, func(d *libvirt.DomainInfo) { d.XML = swapSeed(d.XML, diskXML) })
}

func (h *fakeHost) ResumeDomain(_ context.Context, name string) error {
	h.calls = append(h.calls, "ResumeDomain "+name)
	return h.set(name, func(d *libvirt.DomainInfo) { d.State, d.PausedIOError = libvirt.StateRunning, false })
}
