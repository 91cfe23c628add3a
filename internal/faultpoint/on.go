//go:build faults

package faultpoint

import (
	"fmt"
	"os"
	"sync"
	"syscall"
)

var (
	target, armed = Parse(os.Getenv(EnvKillAt))
	mu            sync.Mutex
	reached       = map[string]int{}
)

// Reach marks a named step: at the reach PKVM_FAULT_KILL_AT names, the process SIGKILLs
// itself (nothing deferred runs, nothing is flushed but this line on stderr).
func Reach(name string) {
	if !armed || name != target.Name {
		return
	}
	mu.Lock()
	reached[name]++
	n := reached[name]
	mu.Unlock()
	if n != target.N {
		return
	}
	fmt.Fprintf(os.Stderr, "faultpoint: killed at %s#%d\n", name, n)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not delivered synchronously; never return into the next step
}
