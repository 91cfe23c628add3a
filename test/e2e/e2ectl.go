//go:build e2e

package e2e

import (
	"flag"
	"fmt"
	"io"
)

// Main is the e2ectl command (test/e2e/e2ectl), the helpers the scripts of cluster/e2e run
// around the tests, configured by the run's configuration file:
//
//	e2ectl [-config FILE] serve             the image server and the 204 origin, until SIGTERM
//	e2ectl [-config FILE] clean NS...       remove what is left of these namespaces on the hosts (libvirt calls)
//	e2ectl [-config FILE] teardown NS...    delete their Proxies, claims and BaseImages through Kubernetes, wait
//	e2ectl [-config FILE] diagnose NS...    print the diagnostics (after a failed bring-up)
//	e2ectl pki DIR IP                       the HTTPS image servers' CAs and certificates for IP (no configuration read)
//
// It returns the exit code.
func Main(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("e2ectl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("config", DefaultConfigFile, "the run's configuration (cluster/e2e/lib.sh writes it)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: e2ectl [-config FILE] serve | clean NS... | teardown NS... | diagnose NS... | pki DIR IP")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	cmd, namespaces := fs.Arg(0), fs.Args()[1:]
	if cmd == "pki" {
		// Before the run's configuration exists: the bring-up mounts the CA into the provider.
		if err := pki(namespaces); err != nil {
			fmt.Fprintf(stderr, "e2ectl pki: %v\n", err)
			return 1
		}
		return 0
	}
	if cmd != "serve" && len(namespaces) == 0 {
		fmt.Fprintf(stderr, "e2ectl %s: name the namespaces\n", cmd)
		return 2
	}
	cfg, err := LoadConfig(*file)
	if err != nil {
		fmt.Fprintf(stderr, "e2ectl: %v\n", err)
		return 1
	}
	switch cmd {
	case "serve":
		return serve(cfg)
	case "clean":
		return clean(cfg, namespaces)
	case "teardown":
		return teardownRun(cfg, namespaces)
	case "diagnose":
		return diagnoseRun(cfg, namespaces)
	}
	fs.Usage()
	return 2
}
