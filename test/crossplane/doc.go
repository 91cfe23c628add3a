// Package crossplanetests runs the real Crossplane CLI (v2.2.1, built from Go modules by
// cluster/crossplane/build.sh; `make tools`) against the project's packages, offline:
//
//   - `crossplane render` of the Proxy Compositions with function-kvm-proxy (built from
//     cmd/function) and function-auto-ready running as local processes on loopback,
//     compared with golden files in testdata/golden (go test -run TestRender -update
//     rewrites them);
//   - `crossplane beta validate` of examples/ and the Compositions against package/crds,
//     the XRDs and Crossplane's own CRDs (taken from the crossplane/v2 Go module);
//   - `crossplane xpkg build` of the three packages through cluster/xpkg/build.sh, read back
//     with `crossplane xpkg extract`.
//
// The binaries come from CROSSPLANE_CLI and FUNCTION_AUTO_READY, or else from
// ${XDG_CACHE_HOME:-~/.cache}/provider-kvm/bin. Without them the tests skip loudly, and fail
// when CI is set. The package has only tests.
package crossplane
