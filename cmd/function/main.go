// Command function is function-kvm-proxy, the composition function of the Proxy API
// (package/configuration). See internal/function.
//
// It serves gRPC on --address (default 0.0.0.0:9443, the port Crossplane dials) with mTLS
// from TLS_SERVER_CERTS_DIR (tls.crt, tls.key, ca.crt; Crossplane's function runtime sets
// it), or without TLS with --insecure (crossplane render, local development). The SDK's
// Prometheus listener is off unless --metrics-address names one.
package main

import (
	"fmt"
	"os"

	"github.com/alecthomas/kingpin/v2"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
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
	// The same flag library as the provider (cmd/provider).
	app := kingpin.New("function-kvm-proxy", "The composition function of the Proxy API.")
	addr := app.Flag("address", "gRPC listen address.").Default("0.0.0.0:9443").String()
	insecure := app.Flag("insecure", "Serve without mTLS (local development only).").Bool()
	certs := app.Flag("tls-server-certs-dir", "Directory with tls.crt, tls.key and ca.crt for mTLS.").Envar("TLS_SERVER_CERTS_DIR").String()
	metrics := app.Flag("metrics-address", "Prometheus metrics listen address, e.g. 127.0.0.1:8080 (default: off).").Default("").String()
	debug := app.Flag("debug", "Log at debug level.").Bool()
	if _, err := app.Parse(args); err != nil {
		return errors.Wrap(err, "cannot parse the command line")
	}
	if !*insecure && *certs == "" {
		return errors.New("set TLS_SERVER_CERTS_DIR (or --tls-server-certs-dir), or --insecure")
	}
	log, err := fnsdk.NewLogger(*debug)
	if err != nil {
		return errors.Wrap(err, "cannot create the logger")
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
	return errors.Wrap(fnsdk.Serve(function.New(log), opts...), "cannot serve")
}
