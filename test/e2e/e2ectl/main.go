//go:build e2e

// Command e2ectl runs the helpers of make e2e, make bench-latency and make demo around their
// tests (serve, clean, teardown, diagnose); see e2e.Main.
package main

import (
	"os"

	"github.com/provider-kvm/provider-kvm/test/e2e"
)

func main() { os.Exit(e2e.Main(os.Args[1:], os.Stderr)) }
