package main

import (
	"os"

	"sigs.k8s.io/yaml"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/sourcepolicy"
)

// platformOf reads what the platform sets for every host config: the image source policy that
// namespaced ProviderConfigs narrow, from the YAML file at path (an ImageSourcePolicy, as in a
// config's spec.imageSources; "" for none: the namespaced built-in denial alone), and whether
// every BaseImage must pin a sha256. A file that is not a valid policy stops the provider.
func platformOf(path string, requireSHA256 bool) (sourcepolicy.Platform, error) {
	pl := sourcepolicy.Platform{RequireSHA256: requireSHA256}
	if path == "" {
		return pl, nil
	}
	b, err := os.ReadFile(path) //nolint:gosec // the platform's own file, named by its flag
	if err != nil {
		return pl, errors.Wrapf(err, "cannot read %s", sourcepolicy.FlagNamespaced)
	}
	if err := yaml.UnmarshalStrict(b, &pl.Namespaced); err != nil {
		return pl, errors.Wrapf(err, "cannot parse %s %s as an imageSources policy", sourcepolicy.FlagNamespaced, path)
	}
	if _, err := sourcepolicy.Namespaced(pl.Namespaced, v1alpha1.ImageSourcePolicy{}); err != nil {
		return pl, errors.Wrapf(err, "invalid %s %s", sourcepolicy.FlagNamespaced, path)
	}
	return pl, nil
}
