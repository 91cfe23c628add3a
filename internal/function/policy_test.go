package function

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	ppv1 "github.com/provider-kvm/provider-kvm/apis/proxypolicy/v1alpha1"
)

func TestReadPolicy(t *testing.T) {
	cases := map[string]struct {
		reason string
		input  string
		want   ppv1.ProxyPolicy
		err    error
	}{
		"NoInput": {
			reason: "a step without input has the zero policy: every default",
		},
		"ProxyPolicy": {
			reason: "a ProxyPolicy is read",
			input:  "apiVersion: proxy.fn.kvm.crossplane.io/v1alpha1\nkind: ProxyPolicy\nplacement: {}\n",
			want:   ppv1.ProxyPolicy{Placement: &ppv1.Placement{}},
		},
		"OtherKind": {
			reason: "an input of another kind is refused, never read as a policy that allows everything",
			input:  "apiVersion: template.fn.crossplane.io/v1beta1\nkind: Input\n",
			err:    errors.New("invalid function input: the step's input is template.fn.crossplane.io/v1beta1, Kind=Input, want proxy.fn.kvm.crossplane.io/v1alpha1 ProxyPolicy"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := &fnv1.RunFunctionRequest{}
			if tc.input != "" {
				req.Input = st(t, tc.input)
			}
			got, err := readPolicy(req)
			if diff := cmp.Diff(tc.err, err, test.EquateErrors()); diff != "" {
				t.Errorf("%s\nreadPolicy(...): -want error, +got error:\n%s", tc.reason, diff)
			}
			if err != nil {
				return
			}
			got.TypeMeta = tc.want.TypeMeta
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\nreadPolicy(...): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}
