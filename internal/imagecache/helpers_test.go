package imagecache

import (
	"encoding/json"
	"testing"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/sourcepolicy/policytest"
)

func wrapErr(err error) error { return errors.Wrap(errors.Wrap(err, "inner"), "outer") }

// jsonRaw encodes r as is (Encode would fix schema and kind).
func jsonRaw(r Record) ([]byte, error) { return json.Marshal(r) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// testConfig names the config of the test's Downloads in messages.
const testConfig = "ClusterProviderConfig/test"

var allowServers = policytest.AllowServers

// downloadsFor compiles p into the Downloads of config testConfig, changed by mods.
func downloadsFor(t testing.TB, p v1alpha1.ImageSourcePolicy, mods ...func(*Downloads)) Downloads {
	t.Helper()
	pol, lim := policytest.Compile(t, p)
	d := Downloads{Config: testConfig, Policy: pol, Limits: lim}
	for _, m := range mods {
		m(&d)
	}
	return d
}
