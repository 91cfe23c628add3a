// mkimage writes the runtime images that make xpkg embeds in the packages. A module of its own
// so that the provider's go.mod does not require go-containerregistry.
module github.com/provider-kvm/provider-kvm/cluster/xpkg/mkimage

go 1.26

require (
	github.com/google/go-cmp v0.7.0
	github.com/google/go-containerregistry v0.21.7
)

require (
	github.com/klauspost/compress v1.18.7 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
)
