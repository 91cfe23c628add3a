package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// serve starts the function like its container does and waits until it listens. The
// server runs until the test binary exits (Serve has no way to stop).
func serve(t *testing.T, args ...string) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- run(args) }()
	addr := args[len(args)-1]
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-errc:
			t.Fatalf("function exited: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			_ = c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("function does not listen on %s", addr)
}

func proxyRequest(t *testing.T) *fnv1.RunFunctionRequest {
	t.Helper()
	xr, err := structpb.NewStruct(map[string]any{
		"apiVersion": "platform.kvm.crossplane.io/v1alpha1",
		"kind":       "Proxy",
		"metadata":   map[string]any{"name": "web", "namespace": "team-a"},
		"spec":       map[string]any{"host": "default", "image": map[string]any{"baseImageName": "debian-12"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &fnv1.RunFunctionRequest{
		Meta:     &fnv1.RequestMeta{Tag: "t"},
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: xr}},
	}
}

func call(t *testing.T, addr string, creds credentials.TransportCredentials) (*fnv1.RunFunctionResponse, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(ctx, proxyRequest(t))
}

func checkComposed(t *testing.T, rsp *fnv1.RunFunctionResponse) {
	t.Helper()
	var names []string
	for n := range rsp.GetDesired().GetResources() {
		names = append(names, n)
	}
	r := rsp.GetDesired().GetResources()
	if len(names) != 3 || r["domain"] == nil || r["seed"] == nil || r["service"] == nil {
		t.Errorf("desired resources = %v, want domain, seed and service (results %v)", names, rsp.GetResults())
	}
}

func TestServeInsecure(t *testing.T) {
	addr := freeAddress(t)
	serve(t, "--insecure", "--address", addr)
	rsp, err := call(t, addr, insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	checkComposed(t, rsp)
}

func TestServeMTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "ca", true)
	srv, srvKey := newCert(t, ca, caKey, "function-kvm-proxy", false)
	cli, cliKey := newCert(t, ca, caKey, "crossplane", false)
	writePEM(t, filepath.Join(dir, "ca.crt"), "CERTIFICATE", ca.Raw)
	writePEM(t, filepath.Join(dir, "tls.crt"), "CERTIFICATE", srv.Raw)
	writeKey(t, filepath.Join(dir, "tls.key"), srvKey)
	t.Setenv("TLS_SERVER_CERTS_DIR", dir)

	addr := freeAddress(t)
	serve(t, "--address", addr)

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	client := tls.Certificate{Certificate: [][]byte{cli.Raw}, PrivateKey: cliKey}
	rsp, err := call(t, addr, credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: "function-kvm-proxy",
		Certificates: []tls.Certificate{client},
	}))
	if err != nil {
		t.Fatal(err)
	}
	checkComposed(t, rsp)

	// A client without a certificate signed by the CA is refused.
	if _, err := call(t, addr, credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: "function-kvm-proxy",
	})); err == nil {
		t.Errorf("a client without a certificate was served")
	}
}

func TestRefusesToServeWithoutCredentials(t *testing.T) {
	t.Setenv("TLS_SERVER_CERTS_DIR", "")
	err := run([]string{"--address", freeAddress(t)})
	if err == nil || !strings.Contains(err.Error(), "TLS_SERVER_CERTS_DIR") {
		t.Errorf("run without TLS or --insecure: %v", err)
	}
}

func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{cn},
		IsCA:         isCA, BasicConstraintsValid: true,
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeKey(t *testing.T, path string, key *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}
