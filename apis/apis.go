// Package apis contains the Kubernetes API types of provider-kvm.
package apis

import (
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// AddToSchemes may be used to add all resources defined in the project to a Scheme.
var AddToSchemes = runtime.SchemeBuilder{v1alpha1.SchemeBuilder.AddToScheme}

// AddToScheme adds all resources of the project to the supplied Scheme.
func AddToScheme(s *runtime.Scheme) error {
	return AddToSchemes.AddToScheme(s)
}
