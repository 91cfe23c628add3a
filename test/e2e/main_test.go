//go:build e2e

package e2e

import (
	"flag"
	"testing"
)

// configFile is the run's configuration (-e2e.config; lib.sh writes it).
var configFile = flag.String("e2e.config", DefaultConfigFile, "the run's configuration, written by cluster/e2e/lib.sh")

// loadRunConfig is the run's configuration; a test without one skips (fails under CI).
func loadRunConfig(t *testing.T) config {
	t.Helper()
	c, err := LoadConfig(*configFile)
	if err != nil {
		notRun(t, err.Error()+" (no make e2e, make demo or make bench-latency run has written it)")
	}
	return c
}
