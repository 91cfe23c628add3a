// Package lantest proves the LAN test bed of cluster/lan (make lan-up; make test-lan): from
// netns node, SSH with pinned host keys reaches host-a and host-b across the LAN and each
// reaches its own libvirtd; a guest booted on host-a's bridge gets a lease from the LAN's
// dnsmasq and its squid answers 204 to node; and no traffic leaves the namespaces.
//
// The tests carry the build tag lan (go test -tags lan ./test/lan/), so that
// go test ./... in the single-host test bed does not run them. Run them with
// cluster/lan/exec.sh node go test -tags lan ./test/lan/ (make test-lan does).
package lan
