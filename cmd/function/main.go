// Command function is function-kvm-proxy, the composition function of the Proxy API
// (package/configuration). See internal/function.
//
// It serves gRPC on --address (default 0.0.0.0:9443, the port Crossplane dials) with mTLS
// from TLS_SERVER_CERTS_DIR (tls.crt, tls.key, ca.crt; Crossplane's function runtime sets
// it), or without TLS with --insecure (crossplane render, local development). The SDK's
// Prometheus listener is off unless --metrics-address names one.
package main

import (
	"flag"
	"fmt"
	"os"

	fnsdk "github.com/crossplane/function-sdk-go"

	"github.com/provider-kvm/provider-kvm/internal/function"
	"github.com/provider-kvm/provider-kvm/internal/version"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "function-kvm-proxy:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("function-kvm-proxy", flag.ContinueOnError)
	addr := fs.String("address", "0.0.0.0:9443", "gRPC listen address")
	insecure := fs.Bool("insecure", false, "serve without mTLS (local development only)")
	certs := fs.String("tls-server-certs-dir", os.Getenv("TLS_SERVER_CERTS_DIR"),
		"directory with tls.crt, tls.key and ca.crt for mTLS (env TLS_SERVER_CERTS_DIR)")
	metrics := fs.String("metrics-address", "", "Prometheus metrics listen address, e.g. 127.0.0.1:8080 (default: off)")
	debug := fs.Bool("debug", false, "log at debug level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*insecure && *certs == "" {
		return fmt.Errorf("set TLS_SERVER_CERTS_DIR (or --tls-server-certs-dir), or --insecure")
	}
	log, err := fnsdk.NewLogger(*debug)
	if err != nil {
		return err
	}
	opts := []fnsdk.ServeOption{
		fnsdk.Listen("tcp", *addr),
		fnsdk.WithMetricsServer(*metrics),
	}
	if *insecure {
		opts = append(opts, fnsdk.Insecure(true))
	} else {
		opts = append(opts, fnsdk.MTLSCertificates(*certs))
	}
	log.Info("serving", "version", version.Version, "address", *addr, "insecure", *insecure)
	return fnsdk.Serve(function.New(log), opts...)
}
