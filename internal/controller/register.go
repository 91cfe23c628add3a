// Package controller wires every provider-kvm controller into a controller manager.
package controller

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"
	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/internal/controller/baseimage"
	"github.com/provider-kvm/provider-kvm/internal/controller/config"
	"github.com/provider-kvm/provider-kvm/internal/controller/hoststatus"
	"github.com/provider-kvm/provider-kvm/internal/controller/kvmdomain"
	"github.com/provider-kvm/provider-kvm/internal/controller/seedvolume"
	"github.com/provider-kvm/provider-kvm/internal/controller/setup"
	"github.com/provider-kvm/provider-kvm/internal/domainevents"
	"github.com/provider-kvm/provider-kvm/internal/host"
)

// SetupGated adds all controllers to mgr. Controllers of managed resources register with
// o.Gate and start only once their CRDs are installed and established (safe-start). They
// share pool: one SSH connection per host.
// events, when not nil, feeds libvirt domain events to the KVMDomain controller; signals, when
// not nil, the pool's connection changes (host.WithOnState) to the host status controllers. The managed
// controllers share one process state (setup.NewShared): the libvirt clients' pool locks and
// domain handles, and the image cache state whose base locks order a base image's removal
// against the creation of overlays onto it.
// shared is that state (setup.NewShared), with what the provider's flags set: the platform's
// image source policy and the publish job limits.
func SetupGated(mgr ctrl.Manager, o controller.Options, conns *host.Connections, events *domainevents.Watcher, signals *hoststatus.Signals, shared *setup.Shared) error {
	if err := config.Setup(mgr, o); err != nil {
		return err
	}
	if err := baseimage.Setup(mgr, o, conns, shared); err != nil {
		return err
	}
	if err := seedvolume.Setup(mgr, o, conns, shared); err != nil {
		return err
	}
	if err := kvmdomain.Setup(mgr, o, conns, events, shared); err != nil {
		return err
	}
	// The host status of every config, read through the same pooled connections.
	return errors.Wrap(hoststatus.Setup(mgr, o, conns, signals, shared.Libvirt, shared.Images, shared.ClusterID), "cannot set up the host status controllers")
}
