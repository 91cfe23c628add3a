package kvmdomain

import (
	"context"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	"github.com/crossplane/crossplane-runtime/v2/pkg/reconciler/managed"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/faultpoint"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
	"github.com/provider-kvm/provider-kvm/internal/ownership"
)

func (e *external) Delete(ctx context.Context, cr *v1alpha1.KVMDomain) (managed.ExternalDelete, error) {
	cr.SetConditions(xpv2.Deleting())
	t := e.target(cr)
	name := t.domain
	d, err := e.lv.Domain(ctx, name)
	switch {
	case libvirt.IsNotFound(err):
	case err != nil:
		return managed.ExternalDelete{}, errors.Wrap(err, errLookup)
	case checkOwner(d, cr) != nil:
		// Not ours: leave the domain alone; only our own overlay goes.
	default:
		if d.State != libvirt.StateShutOff {
			if err := e.powerOff(ctx, cr, name, d.State); err != nil {
				return managed.ExternalDelete{}, err
			}
			faultpoint.Reach(faultpoint.DomainPowerOff)
			return managed.ExternalDelete{}, errors.Errorf(errWaitShutdown, shutdownGrace(cr))
		}
		log, _ := domainxml.ConsoleLogOf(d.InactiveXML)
		if err := e.lv.UndefineDomain(ctx, name); err != nil && !libvirt.IsNotFound(err) {
			return managed.ExternalDelete{}, err
		}
		faultpoint.Reach(faultpoint.DomainUndefined)
		e.deleteConsoleLog(ctx, t, log)
	}
	e.shutdowns.done(cr.GetUID())
	if e.tails != nil {
		e.tails.forget(cr.GetUID())
	}
	return managed.ExternalDelete{}, e.deleteOverlay(ctx, cr, t)
}

// deleteOverlay removes our overlay and then its ownership record. An overlay without our
// record is left where it is, and said so.
func (e *external) deleteOverlay(ctx context.Context, cr *v1alpha1.KVMDomain, t target) error {
	_, err := e.lv.Volume(ctx, t.pool, t.overlay)
	switch {
	case libvirt.IsNotFound(err):
	case err != nil:
		return errors.Wrap(err, errDeleteOverlay)
	default:
		verr := e.records.VerifyFresh(ctx, e.lv, e.host, t.pool, t.overlay, t.owner)
		if ownership.IsNotOwned(verr) {
			e.recorder.Event(cr, event.Warning(reasonLeft, verr))
			return nil
		}
		if verr != nil {
			return errors.Wrap(verr, errDeleteOverlay)
		}
		if err := e.lv.DeleteVolume(ctx, t.pool, t.overlay); err != nil && !libvirt.IsNotFound(err) {
			return errors.Wrap(err, errDeleteOverlay)
		}
		faultpoint.Reach(faultpoint.DomainOverlayDeleted)
	}
	return errors.Wrap(e.records.Release(ctx, e.lv, e.host, t.pool, t.overlay, t.owner), errDeleteOverlay)
}
