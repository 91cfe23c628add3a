//go:build e2e

package e2e

import (
	"strings"

	"github.com/provider-kvm/provider-kvm/test/support/hostinspect"
)

// The hosts of the topology as the test sees them (test/support/hostinspect): their
// libvirtd's socket on this machine, not the provider's SSH connection.
type (
	host   = hostinspect.Host
	hosts  = hostinspect.Hosts
	object = hostinspect.Object
)

func objectList(objs []object) string { return hostinspect.List(objs) }

// dialHosts connects to every host of the topology.
func dialHosts(cfg config) (hosts, error) {
	list := make([]*host, 0, len(cfg.Hosts))
	for _, hc := range cfg.Hosts {
		list = append(list, &host{Name: hc.Name, Socket: hc.Socket, URI: cfg.LibvirtURI, Pool: hc.Pool, LibDir: hc.LibDir, LogDir: hc.LogDir})
	}
	return hostinspect.Dial(list)
}

// clean is e2ectl clean: remove what is left of the namespaces (and any base image volume)
// on the hosts, saying what; 1 when something could not be removed.
func clean(cfg config, namespaces []string) int {
	hs, err := dialHosts(cfg)
	if err != nil {
		warnf("%v", err)
		return 1
	}
	defer hs.Close()
	left, err := hs.Leftovers(namespaces, nil)
	if err != nil {
		warnf("%v", err)
		return 1
	}
	if len(left) == 0 {
		return 0
	}
	warnf("the hosts hold objects of %s (removing them with libvirt calls):\n%s", strings.Join(namespaces, ", "), indent(strings.ReplaceAll(objectList(left), ", ", "\n"), "  "))
	for _, err := range hs.Remove(left) {
		warnf("%v", err)
	}
	if left, err = hs.Leftovers(namespaces, nil); err != nil || len(left) > 0 {
		warnf("still on the hosts: %s %v", objectList(left), err)
		return 1
	}
	return 0
}
