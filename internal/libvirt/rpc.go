package libvirt

// Code below is written out by hand from go-libvirt's signatures: one counting method per RPC
// the Client makes.

import (
	"context"
	"io"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

const errNotSent = "libvirt call %s not sent: the context has ended"

// rpc is the libvirt client as the Client's calls see it: every RPC they make passes through
// one of its methods, which counts it (provider_kvm_libvirt_calls_total) for the kind the
// call's context carries.
type rpc struct {
	l     *golibvirt.Libvirt
	ctx   context.Context // carries the kind label of one call
	count func(ctx context.Context, op string)
}

// send is called before each RPC: it fails when the call's context has ended (nothing more is
// sent for a call its caller gave up on, e.g. one Conn.Do abandoned), else counts the RPC.
func (r rpc) send(op string) error {
	if err := r.ctx.Err(); err != nil {
		return errors.Wrapf(err, errNotSent, op)
	}
	r.count(r.ctx, op)
	return nil
}

// do runs fn on the host's libvirt client, bounded by ctx, counting its RPCs for the kind ctx
// carries, else the Client's (WithKind).
func (c *Client) do(ctx context.Context, fn func(l rpc) error) error {
	ctx = c.withKind(ctx)
	return c.conn.Do(ctx, func(l *golibvirt.Libvirt) error { return fn(rpc{l: l, ctx: ctx, count: c.count}) })
}

// withKind returns ctx with the Client's kind unless ctx carries one.
func (c *Client) withKind(ctx context.Context) context.Context {
	if metrics.KindFrom(ctx) != metrics.KindOther {
		return ctx
	}
	return metrics.WithKind(ctx, c.kind)
}

// ConnectListAllDomains is go-libvirt's ConnectListAllDomains, counted.
func (r rpc) ConnectListAllDomains(needResults int32, flags golibvirt.ConnectListAllDomainsFlags) ([]golibvirt.Domain, uint32, error) {
	if err := r.send("ConnectListAllDomains"); err != nil {
		return nil, 0, err
	}
	return r.l.ConnectListAllDomains(needResults, flags)
}

// ConnectListAllStoragePools is go-libvirt's ConnectListAllStoragePools, counted.
func (r rpc) ConnectListAllStoragePools(needResults int32, flags golibvirt.ConnectListAllStoragePoolsFlags) ([]golibvirt.StoragePool, uint32, error) {
	if err := r.send("ConnectListAllStoragePools"); err != nil {
		return nil, 0, err
	}
	return r.l.ConnectListAllStoragePools(needResults, flags)
}

// ConnectGetLibVersion is go-libvirt's ConnectGetLibVersion, counted.
func (r rpc) ConnectGetLibVersion() (uint64, error) {
	if err := r.send("ConnectGetLibVersion"); err != nil {
		return 0, err
	}
	return r.l.ConnectGetLibVersion()
}

// DomainBlockResize is go-libvirt's DomainBlockResize, counted.
func (r rpc) DomainBlockResize(dom golibvirt.Domain, disk string, size uint64, flags golibvirt.DomainBlockResizeFlags) error {
	if err := r.send("DomainBlockResize"); err != nil {
		return err
	}
	return r.l.DomainBlockResize(dom, disk, size, flags)
}

// DomainCreate is go-libvirt's DomainCreate, counted.
func (r rpc) DomainCreate(dom golibvirt.Domain) error {
	if err := r.send("DomainCreate"); err != nil {
		return err
	}
	return r.l.DomainCreate(dom)
}

// DomainDefineXML is go-libvirt's DomainDefineXML, counted.
func (r rpc) DomainDefineXML(xml string) (golibvirt.Domain, error) {
	if err := r.send("DomainDefineXML"); err != nil {
		return golibvirt.Domain{}, err
	}
	return r.l.DomainDefineXML(xml)
}

// DomainDestroy is go-libvirt's DomainDestroy, counted.
func (r rpc) DomainDestroy(dom golibvirt.Domain) error {
	if err := r.send("DomainDestroy"); err != nil {
		return err
	}
	return r.l.DomainDestroy(dom)
}

// DomainGetAutostart is go-libvirt's DomainGetAutostart, counted.
func (r rpc) DomainGetAutostart(dom golibvirt.Domain) (int32, error) {
	if err := r.send("DomainGetAutostart"); err != nil {
		return 0, err
	}
	return r.l.DomainGetAutostart(dom)
}

// DomainGetState is go-libvirt's DomainGetState, counted.
func (r rpc) DomainGetState(dom golibvirt.Domain, flags uint32) (int32, int32, error) {
	if err := r.send("DomainGetState"); err != nil {
		return 0, 0, err
	}
	return r.l.DomainGetState(dom, flags)
}

// DomainResume is go-libvirt's DomainResume, counted.
func (r rpc) DomainResume(dom golibvirt.Domain) error {
	if err := r.send("DomainResume"); err != nil {
		return err
	}
	return r.l.DomainResume(dom)
}

// DomainGetXMLDesc is go-libvirt's DomainGetXMLDesc, counted.
func (r rpc) DomainGetXMLDesc(dom golibvirt.Domain, flags golibvirt.DomainXMLFlags) (string, error) {
	if err := r.send("DomainGetXMLDesc"); err != nil {
		return "", err
	}
	return r.l.DomainGetXMLDesc(dom, flags)
}

// DomainInterfaceAddresses is go-libvirt's DomainInterfaceAddresses, counted.
func (r rpc) DomainInterfaceAddresses(dom golibvirt.Domain, source uint32, flags uint32) ([]golibvirt.DomainInterface, error) {
	if err := r.send("DomainInterfaceAddresses"); err != nil {
		return nil, err
	}
	return r.l.DomainInterfaceAddresses(dom, source, flags)
}

// DomainLookupByName is go-libvirt's DomainLookupByName, counted.
func (r rpc) DomainLookupByName(name string) (golibvirt.Domain, error) {
	if err := r.send("DomainLookupByName"); err != nil {
		return golibvirt.Domain{}, err
	}
	return r.l.DomainLookupByName(name)
}

// DomainSetAutostart is go-libvirt's DomainSetAutostart, counted.
func (r rpc) DomainSetAutostart(dom golibvirt.Domain, autostart int32) error {
	if err := r.send("DomainSetAutostart"); err != nil {
		return err
	}
	return r.l.DomainSetAutostart(dom, autostart)
}

// DomainShutdown is go-libvirt's DomainShutdown, counted.
func (r rpc) DomainShutdown(dom golibvirt.Domain) error {
	if err := r.send("DomainShutdown"); err != nil {
		return err
	}
	return r.l.DomainShutdown(dom)
}

// DomainUndefineFlags is go-libvirt's DomainUndefineFlags, counted.
func (r rpc) DomainUndefineFlags(dom golibvirt.Domain, flags golibvirt.DomainUndefineFlagsValues) error {
	if err := r.send("DomainUndefineFlags"); err != nil {
		return err
	}
	return r.l.DomainUndefineFlags(dom, flags)
}

// StoragePoolGetInfo is go-libvirt's StoragePoolGetInfo, counted.
func (r rpc) StoragePoolGetInfo(pool golibvirt.StoragePool) (uint8, uint64, uint64, uint64, error) {
	if err := r.send("StoragePoolGetInfo"); err != nil {
		return 0, 0, 0, 0, err
	}
	return r.l.StoragePoolGetInfo(pool)
}

// StoragePoolGetXMLDesc is go-libvirt's StoragePoolGetXMLDesc, counted.
func (r rpc) StoragePoolGetXMLDesc(pool golibvirt.StoragePool, flags golibvirt.StorageXMLFlags) (string, error) {
	if err := r.send("StoragePoolGetXMLDesc"); err != nil {
		return "", err
	}
	return r.l.StoragePoolGetXMLDesc(pool, flags)
}

// StoragePoolIsActive is go-libvirt's StoragePoolIsActive, counted.
func (r rpc) StoragePoolIsActive(pool golibvirt.StoragePool) (int32, error) {
	if err := r.send("StoragePoolIsActive"); err != nil {
		return 0, err
	}
	return r.l.StoragePoolIsActive(pool)
}

// StoragePoolListAllVolumes is go-libvirt's StoragePoolListAllVolumes, counted.
func (r rpc) StoragePoolListAllVolumes(pool golibvirt.StoragePool, needResults int32, flags uint32) ([]golibvirt.StorageVol, uint32, error) {
	if err := r.send("StoragePoolListAllVolumes"); err != nil {
		return nil, 0, err
	}
	return r.l.StoragePoolListAllVolumes(pool, needResults, flags)
}

// StoragePoolLookupByName is go-libvirt's StoragePoolLookupByName, counted.
func (r rpc) StoragePoolLookupByName(name string) (golibvirt.StoragePool, error) {
	if err := r.send("StoragePoolLookupByName"); err != nil {
		return golibvirt.StoragePool{}, err
	}
	return r.l.StoragePoolLookupByName(name)
}

// StoragePoolRefresh is go-libvirt's StoragePoolRefresh, counted.
func (r rpc) StoragePoolRefresh(pool golibvirt.StoragePool, flags uint32) error {
	if err := r.send("StoragePoolRefresh"); err != nil {
		return err
	}
	return r.l.StoragePoolRefresh(pool, flags)
}

// StorageVolCreateXML is go-libvirt's StorageVolCreateXML, counted.
func (r rpc) StorageVolCreateXML(pool golibvirt.StoragePool, xml string, flags golibvirt.StorageVolCreateFlags) (golibvirt.StorageVol, error) {
	if err := r.send("StorageVolCreateXML"); err != nil {
		return golibvirt.StorageVol{}, err
	}
	return r.l.StorageVolCreateXML(pool, xml, flags)
}

// StorageVolDelete is go-libvirt's StorageVolDelete, counted.
func (r rpc) StorageVolDelete(vol golibvirt.StorageVol, flags golibvirt.StorageVolDeleteFlags) error {
	if err := r.send("StorageVolDelete"); err != nil {
		return err
	}
	return r.l.StorageVolDelete(vol, flags)
}

// StorageVolDownload is go-libvirt's StorageVolDownload, counted.
func (r rpc) StorageVolDownload(vol golibvirt.StorageVol, inStream io.Writer, offset uint64, length uint64, flags golibvirt.StorageVolDownloadFlags) error {
	if err := r.send("StorageVolDownload"); err != nil {
		return err
	}
	return r.l.StorageVolDownload(vol, inStream, offset, length, flags)
}

// StorageVolGetInfo is go-libvirt's StorageVolGetInfo, counted.
func (r rpc) StorageVolGetInfo(vol golibvirt.StorageVol) (int8, uint64, uint64, error) {
	if err := r.send("StorageVolGetInfo"); err != nil {
		return 0, 0, 0, err
	}
	return r.l.StorageVolGetInfo(vol)
}

// StorageVolGetInfoFlags is go-libvirt's StorageVolGetInfoFlags, counted.
func (r rpc) StorageVolGetInfoFlags(vol golibvirt.StorageVol, flags uint32) (int8, uint64, uint64, error) {
	if err := r.send("StorageVolGetInfoFlags"); err != nil {
		return 0, 0, 0, err
	}
	return r.l.StorageVolGetInfoFlags(vol, flags)
}

// StorageVolGetPath is go-libvirt's StorageVolGetPath, counted.
func (r rpc) StorageVolGetPath(vol golibvirt.StorageVol) (string, error) {
	if err := r.send("StorageVolGetPath"); err != nil {
		return "", err
	}
	return r.l.StorageVolGetPath(vol)
}

// StorageVolGetXMLDesc is go-libvirt's StorageVolGetXMLDesc, counted.
func (r rpc) StorageVolGetXMLDesc(vol golibvirt.StorageVol, flags uint32) (string, error) {
	if err := r.send("StorageVolGetXMLDesc"); err != nil {
		return "", err
	}
	return r.l.StorageVolGetXMLDesc(vol, flags)
}

// StorageVolLookupByName is go-libvirt's StorageVolLookupByName, counted.
func (r rpc) StorageVolLookupByName(pool golibvirt.StoragePool, name string) (golibvirt.StorageVol, error) {
	if err := r.send("StorageVolLookupByName"); err != nil {
		return golibvirt.StorageVol{}, err
	}
	return r.l.StorageVolLookupByName(pool, name)
}

// StorageVolResize is go-libvirt's StorageVolResize, counted.
func (r rpc) StorageVolResize(vol golibvirt.StorageVol, capacity uint64, flags golibvirt.StorageVolResizeFlags) error {
	if err := r.send("StorageVolResize"); err != nil {
		return err
	}
	return r.l.StorageVolResize(vol, capacity, flags)
}

// StorageVolUpload is go-libvirt's StorageVolUpload, counted.
func (r rpc) StorageVolUpload(vol golibvirt.StorageVol, outStream io.Reader, offset uint64, length uint64, flags golibvirt.StorageVolUploadFlags) error {
	if err := r.send("StorageVolUpload"); err != nil {
		return err
	}
	return r.l.StorageVolUpload(vol, outStream, offset, length, flags)
}

// DomainUpdateDeviceFlags is go-libvirt's DomainUpdateDeviceFlags, counted.
func (r rpc) DomainUpdateDeviceFlags(dom golibvirt.Domain, xml string, flags golibvirt.DomainDeviceModifyFlags) error {
	if err := r.send("DomainUpdateDeviceFlags"); err != nil {
		return err
	}
	return r.l.DomainUpdateDeviceFlags(dom, xml, flags)
}

// NetworkLookupByName is go-libvirt's NetworkLookupByName, counted.
func (r rpc) NetworkLookupByName(name string) (golibvirt.Network, error) {
	if err := r.send("NetworkLookupByName"); err != nil {
		return golibvirt.Network{}, err
	}
	return r.l.NetworkLookupByName(name)
}

// NetworkGetXMLDesc is go-libvirt's NetworkGetXMLDesc, counted.
func (r rpc) NetworkGetXMLDesc(n golibvirt.Network, flags uint32) (string, error) {
	if err := r.send("NetworkGetXMLDesc"); err != nil {
		return "", err
	}
	return r.l.NetworkGetXMLDesc(n, flags)
}
