package function

import (
	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/crossplane/function-sdk-go/request"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
)

// readPolicy reads the step's input, the platform team's ProxyPolicy. A step without input
// has the zero policy: the default of every field. An input of another kind is refused, so a
// typo in the Composition is not silently a policy that allows everything.
func readPolicy(req *fnv1.RunFunctionRequest) (ppv1.ProxyPolicy, error) {
	var pol ppv1.ProxyPolicy
	if req.GetInput() == nil {
		return pol, nil
	}
	if err := request.GetInput(req, &pol); err != nil {
		return pol, errors.Wrap(err, "invalid function input")
	}
	if gvk := pol.GroupVersionKind(); gvk.Group != ppv1.Group || gvk.Kind != ppv1.Kind {
		return pol, errors.Errorf("invalid function input: the step's input is %s, want %s/%s %s", gvk, ppv1.Group, ppv1.Version, ppv1.Kind)
	}
	return pol, nil
}
