// Package controller wires every provider-kvm controller into a controller manager.
package controller

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/crossplane/crossplane-runtime/v2/pkg/controller"

	"github.com/provider-kvm/provider-kvm/internal/controller/config"
)

// SetupGated adds all controllers to mgr. Controllers of managed resources register with
// o.Gate and start only once their CRDs are installed and established (safe-start).
func SetupGated(mgr ctrl.Manager, o controller.Options) error {
	for _, setup := range []func(ctrl.Manager, controller.Options) error{
		config.Setup,
	} {
		if err := setup(mgr, o); err != nil {
			return err
		}
	}
	return nil
}
