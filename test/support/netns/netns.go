// Package netns tells a test whether it runs inside the network namespace of a test bed, where
// the only hosts it may talk to live.
package netns

import (
	"fmt"
	"syscall"
)

// Inside says why this process is not inside network namespace name (one that ip netns
// created, under /run/netns), or returns nil.
func Inside(name string) error {
	var self, ns syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &self); err != nil {
		return fmt.Errorf("reading this process's network namespace: %w", err)
	}
	if err := syscall.Stat("/run/netns/"+name, &ns); err != nil {
		return fmt.Errorf("network namespace %s does not exist: %w", name, err)
	}
	if self.Ino != ns.Ino || self.Dev != ns.Dev {
		return fmt.Errorf("this test process is not inside network namespace %s", name)
	}
	return nil
}
