package libvirt

import (
	"context"
	"net"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

const (
	errLookupDomain    = "cannot look up domain %q on %s"
	errDefineDomain    = "cannot define domain on %s"
	errChangeMedia     = "cannot change the medium of a cdrom of running domain %q on %s"
	errStartDomain     = "cannot start domain %q on %s"
	errShutdownDomain  = "cannot shut down domain %q on %s"
	errDestroyDomain   = "cannot stop domain %q on %s"
	errUndefineDomain  = "cannot undefine domain %q on %s"
	errAutostartDomain = "cannot set autostart of domain %q on %s"
	errDomainAddresses = "cannot read the addresses of domain %q from %s"
	errResumeDomain    = "cannot resume domain %q on %s"
)

// Domain states, as KVMDomain status reports them.
const (
	StateNoState      = "NoState"
	StateRunning      = "Running"
	StateBlocked      = "Blocked"
	StatePaused       = "Paused"
	StateShuttingDown = "ShuttingDown"
	StateShutOff      = "ShutOff"
	StateCrashed      = "Crashed"
	StateSuspended    = "Suspended"
)

// StateName maps libvirt's domain state to the name KVMDomain status uses.
func StateName(s golibvirt.DomainState) string {
	switch s {
	case golibvirt.DomainRunning:
		return StateRunning
	case golibvirt.DomainBlocked:
		return StateBlocked
	case golibvirt.DomainPaused:
		return StatePaused
	case golibvirt.DomainShutdown:
		return StateShuttingDown
	case golibvirt.DomainShutoff:
		return StateShutOff
	case golibvirt.DomainCrashed:
		return StateCrashed
	case golibvirt.DomainPmsuspended:
		return StateSuspended
	default:
		return StateNoState
	}
}

// DomainInfo is what Observe needs to know of a domain.
type DomainInfo struct {
	Name string
	// UUID in its canonical text form.
	UUID  string
	State string
	// XML is the live definition of a running domain, else the persistent one.
	XML string
	// InactiveXML is the persistent definition, used at the next boot.
	InactiveXML string
	Autostart   bool
	// PausedIOError is true for a domain QEMU paused because a write to one of its disks
	// failed (libvirt's state paused, reason I/O error), e.g. on a full pool. It stays paused
	// until resumed.
	PausedIOError bool
}

// Shared.domains remembers the handle (name and UUID) of each domain looked up, by host and
// name: libvirtd resolves a handle by its UUID, so a domain undefined and defined again under
// the name fails with IsNotFound and is looked up afresh.

// Domain returns the state and definitions of the named domain: three RPCs for a shut-off
// domain, four for an active one, one more when the domain was not looked up before.
func (c *Client) Domain(ctx context.Context, name string) (DomainInfo, error) {
	var out DomainInfo
	key := c.handleKey(name)
	err := c.do(ctx, func(l rpc) error {
		h, cached := c.sh.domains.Load(key)
		dom, _ := h.(golibvirt.Domain)
		var st, reason int32
		var err error
		if cached {
			st, reason, err = l.DomainGetState(dom, 0)
		}
		if !cached || IsNotFound(err) {
			c.sh.domains.Delete(key)
			if dom, err = l.DomainLookupByName(name); err != nil {
				return err
			}
			c.sh.domains.Store(key, dom)
			st, reason, err = l.DomainGetState(dom, 0)
		}
		if err != nil {
			return err
		}
		state := golibvirt.DomainState(st)
		if out.InactiveXML, err = l.DomainGetXMLDesc(dom, golibvirt.DomainXMLInactive); err != nil {
			return err
		}
		// A shut-off domain has no live definition: libvirt returns the persistent one.
		out.XML = out.InactiveXML
		if state != golibvirt.DomainShutoff {
			if out.XML, err = l.DomainGetXMLDesc(dom, 0); err != nil {
				return err
			}
		}
		auto, err := l.DomainGetAutostart(dom)
		if err != nil {
			return err
		}
		out.Name, out.UUID = dom.Name, uuidString(dom.UUID)
		out.State, out.Autostart = StateName(state), auto == 1
		out.PausedIOError = state == golibvirt.DomainPaused && golibvirt.DomainPausedReason(reason) == golibvirt.DomainPausedIoerror
		return nil
	})
	return out, errors.Wrapf(err, errLookupDomain, name, c.conn.Address())
}

// DefineDomain defines (or redefines, for the same name and UUID) a persistent domain.
func (c *Client) DefineDomain(ctx context.Context, xml string) error {
	err := c.do(ctx, func(l rpc) error {
		d, err := l.DomainDefineXML(xml)
		if err == nil && c.sh != nil {
			// Forgotten at once, not only when its event comes.
			c.sh.defs.changed(c.conn.Address(), d.Name)
		}
		return err
	})
	return errors.Wrapf(err, errDefineDomain, c.conn.Address())
}

// withDomain runs fn on the named domain.
func (c *Client) withDomain(ctx context.Context, name string, fn func(l rpc, d golibvirt.Domain) error) error {
	return c.do(ctx, func(l rpc) error {
		d, err := l.DomainLookupByName(name)
		if err != nil {
			return err
		}
		return fn(l, d)
	})
}

// handleKey is the key of name's remembered handle: domain names are unique per host.
func (c *Client) handleKey(name string) string { return c.conn.Address() + "\x00" + name }

// withKnownDomain runs fn on the named domain, through the handle Domain remembered when
// there is one (no lookup); when fn fails with IsNotFound on it, the domain is looked up and
// fn runs again.
func (c *Client) withKnownDomain(ctx context.Context, name string, fn func(l rpc, d golibvirt.Domain) error) error {
	key := c.handleKey(name)
	return c.do(ctx, func(l rpc) error {
		if h, ok := c.sh.domains.Load(key); ok {
			err := fn(l, h.(golibvirt.Domain)) // only Domains are stored
			if !IsNotFound(err) {
				return err
			}
			c.sh.domains.Delete(key)
		}
		d, err := l.DomainLookupByName(name)
		if err != nil {
			return err
		}
		c.sh.domains.Store(key, d)
		return fn(l, d)
	})
}

// StartDomain boots a defined domain.
func (c *Client) StartDomain(ctx context.Context, name string) error {
	err := c.withDomain(ctx, name, func(l rpc, d golibvirt.Domain) error { return l.DomainCreate(d) })
	return errors.Wrapf(err, errStartDomain, name, c.conn.Address())
}

// ResumeDomain resumes a paused domain.
func (c *Client) ResumeDomain(ctx context.Context, name string) error {
	err := c.withDomain(ctx, name, func(l rpc, d golibvirt.Domain) error { return l.DomainResume(d) })
	return errors.Wrapf(err, errResumeDomain, name, c.conn.Address())
}

// ShutdownDomain asks the guest to shut down (ACPI power button). It returns at once.
func (c *Client) ShutdownDomain(ctx context.Context, name string) error {
	err := c.withDomain(ctx, name, func(l rpc, d golibvirt.Domain) error { return l.DomainShutdown(d) })
	return errors.Wrapf(err, errShutdownDomain, name, c.conn.Address())
}

// DestroyDomain stops a running domain at once, like pulling its plug.
func (c *Client) DestroyDomain(ctx context.Context, name string) error {
	err := c.withDomain(ctx, name, func(l rpc, d golibvirt.Domain) error { return l.DomainDestroy(d) })
	return errors.Wrapf(err, errDestroyDomain, name, c.conn.Address())
}

// Versions of libvirt that first accept each undefine flag (libvirt's virDomainUndefineFlags
// documentation). An older libvirtd refuses a flag it does not know with "unsupported flags",
// so UndefineDomain asks the daemon's version first.
const (
	libvirtManagedSaveMin         uint64 = 9_004     // 0.9.4
	libvirtSnapshotsMetadataMin   uint64 = 9_005     // 0.9.5
	libvirtNvramMin               uint64 = 1_002_009 // 1.2.9
	libvirtCheckpointsMetadataMin uint64 = 5_006_000 // 5.6.0
	libvirtTpmMin                 uint64 = 8_009_000 // 8.9.0
)

// UndefineFlags are the flags UndefineDomain passes to a libvirt of version v (major*1e6 +
// minor*1e3 + micro): remove the managed save image, snapshot and checkpoint metadata, the
// NVRAM file and the TPM state, each where v supports it. A domain with snapshots or
// checkpoints cannot be undefined without the metadata flags; one with NVRAM (UEFI) not
// without the NVRAM flag.
func UndefineFlags(v uint64) golibvirt.DomainUndefineFlagsValues {
	var f golibvirt.DomainUndefineFlagsValues
	for _, x := range []struct {
		min  uint64
		flag golibvirt.DomainUndefineFlagsValues
	}{
		{libvirtManagedSaveMin, golibvirt.DomainUndefineManagedSave},
		{libvirtSnapshotsMetadataMin, golibvirt.DomainUndefineSnapshotsMetadata},
		{libvirtNvramMin, golibvirt.DomainUndefineNvram},
		{libvirtCheckpointsMetadataMin, golibvirt.DomainUndefineCheckpointsMetadata},
		{libvirtTpmMin, golibvirt.DomainUndefineTpm},
	} {
		if v >= x.min {
			f |= x.flag
		}
	}
	return f
}

// UndefineDomain removes a stopped domain's definition with its managed save image, snapshot
// and checkpoint metadata, NVRAM file and TPM state, using the flags the host's libvirt
// supports (UndefineFlags): two RPCs more than the lookup, the version and the undefine.
func (c *Client) UndefineDomain(ctx context.Context, name string) error {
	err := c.withDomain(ctx, name, func(l rpc, d golibvirt.Domain) error {
		v, err := l.ConnectGetLibVersion()
		if err != nil {
			return errors.Wrap(err, "cannot read the libvirt version")
		}
		return l.DomainUndefineFlags(d, UndefineFlags(v))
	})
	if err == nil {
		// The remembered handle names a domain that is gone: forget it now rather than at
		// the next lookup, which may never come.
		c.sh.domains.Delete(c.handleKey(name))
	}
	return errors.Wrapf(err, errUndefineDomain, name, c.conn.Address())
}

// BlockResize grows a running domain's disk (given by its path on the host) to size bytes;
// QEMU resizes the image it holds open and tells the guest.
func (c *Client) BlockResize(ctx context.Context, name, path string, size uint64) error {
	err := c.withDomain(ctx, name, func(l rpc, d golibvirt.Domain) error {
		return l.DomainBlockResize(d, path, size, golibvirt.DomainBlockResizeBytes)
	})
	return errors.Wrapf(err, "cannot resize disk %s of domain %s on %s", path, name, c.conn.Address())
}

// SetAutostart sets whether the domain starts with the host's libvirt daemon.
func (c *Client) SetAutostart(ctx context.Context, name string, on bool) error {
	v := int32(0)
	if on {
		v = 1
	}
	err := c.withDomain(ctx, name, func(l rpc, d golibvirt.Domain) error { return l.DomainSetAutostart(d, v) })
	return errors.Wrapf(err, errAutostartDomain, name, c.conn.Address())
}

// ChangeMedia puts the medium of diskXML (a cdrom <disk> element, matched by its target) into
// the running domain, ejecting the one it has even if the guest locked the tray. The persistent
// definition is left as it is.
func (c *Client) ChangeMedia(ctx context.Context, name, diskXML string) error {
	err := c.withDomain(ctx, name, func(l rpc, d golibvirt.Domain) error {
		return l.DomainUpdateDeviceFlags(d, diskXML, golibvirt.DomainDeviceModifyLive|golibvirt.DomainDeviceModifyForce)
	})
	return errors.Wrapf(err, errChangeMedia, name, c.conn.Address())
}

// Address sources, in the order Observe tries them.
const (
	SourceLease = "lease"
	SourceAgent = "agent"
	SourceARP   = "arp"
)

// DomainIPv4 returns the first routable IPv4 address libvirt knows for the interface with
// mac, asking source (lease, agent or arp). It returns "" when there is none yet.
func (c *Client) DomainIPv4(ctx context.Context, name, mac, source string) (string, error) {
	src := map[string]uint32{
		SourceLease: uint32(golibvirt.DomainInterfaceAddressesSrcLease),
		SourceAgent: uint32(golibvirt.DomainInterfaceAddressesSrcAgent),
		SourceARP:   uint32(golibvirt.DomainInterfaceAddressesSrcArp),
	}[source]
	var ip string
	err := c.withKnownDomain(ctx, name, func(l rpc, d golibvirt.Domain) error {
		ifaces, err := l.DomainInterfaceAddresses(d, src, 0)
		if err != nil {
			return err
		}
		ip = FirstRoutableIPv4(ifaces, mac)
		return nil
	})
	return ip, errors.Wrapf(err, errDomainAddresses, name, source)
}

// FirstRoutableIPv4 picks the first IPv4 address of the interface with mac (any interface
// when mac is empty) that is neither loopback nor link-local.
func FirstRoutableIPv4(ifaces []golibvirt.DomainInterface, mac string) string {
	for _, i := range ifaces {
		if mac != "" && (len(i.Hwaddr) == 0 || !strings.EqualFold(i.Hwaddr[0], mac)) {
			continue
		}
		for _, a := range i.Addrs {
			ip := net.ParseIP(a.Addr).To4()
			if ip == nil || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() {
				continue
			}
			return ip.String()
		}
	}
	return ""
}

func uuidString(u golibvirt.UUID) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 36)
	for i, x := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hex[x>>4], hex[x&0xf])
	}
	return string(b)
}

// DomainDefinitions returns the definition of every domain on the host, running or defined
// (the live one of a running domain): one RPC, and one more per domain. A domain that goes
// away meanwhile is left out.
func (c *Client) DomainDefinitions(ctx context.Context) ([]string, error) {
	var out []string
	err := c.do(ctx, func(l rpc) error {
		var err error
		out, err = c.allDefinitions(l)
		return err
	})
	return out, errors.Wrapf(err, errListDomains, c.conn.Address())
}

// allDefinitions is allDomainXML through the definitions the process remembers of the host
// (definitions.go): one call, and one per domain new or changed since the last read.
func (c *Client) allDefinitions(l rpc) ([]string, error) {
	if c.sh == nil {
		return allDomainXML(l)
	}
	return c.sh.defs.read(c.conn.Address(), time.Now(), l.allDomains, l.domainXML)
}

// allDomainXML is the definition of every domain, running or defined, on one connection; a
// domain that goes away meanwhile is left out.
func allDomainXML(l rpc) ([]string, error) {
	doms, err := l.allDomains()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(doms))
	for _, d := range doms {
		doc, err := l.domainXML(d)
		if err != nil {
			return nil, err
		}
		if doc != "" {
			out = append(out, doc)
		}
	}
	return out, nil
}

// allDomains lists every domain, running or defined: one call.
func (l rpc) allDomains() ([]golibvirt.Domain, error) {
	doms, _, err := l.ConnectListAllDomains(1, golibvirt.ConnectListDomainsActive|golibvirt.ConnectListDomainsInactive)
	return doms, err
}

// domainXML is the definition of d (the live one of a running domain), "" when it went away.
func (l rpc) domainXML(d golibvirt.Domain) (string, error) {
	doc, err := l.DomainGetXMLDesc(d, 0)
	if IsNotFound(err) {
		return "", nil
	}
	return doc, err
}
