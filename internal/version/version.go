// Package version holds the provider's version, set at build time with
// -ldflags "-X github.com/provider-kvm/provider-kvm/internal/version.Version=...".
package version

// Version of the provider.
var Version = "v0.0.0-dev"
