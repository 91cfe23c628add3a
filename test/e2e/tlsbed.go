//go:build e2e

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The test bed's HTTPS image servers (docs/e2e.md, "HTTPS and the provider's extra CA"): each
// has a CA of its own that the run makes (e2ectl pki, before the node's packages are
// installed) and a server certificate for the node's LAN address. The trusted CA reaches the
// provider's pod as a platform team's would, through the DeploymentRuntimeConfig
// (cluster/node/packages.sh: a ConfigMap mounted under SSL_CERT_DIR); the untrusted one
// reaches nothing, so a download from its server must fail on the certificate.
const (
	tlsTrusted   = "trusted"
	tlsUntrusted = "untrusted"
	caCertFile   = "ca.crt"
	serverCert   = "server.crt"
	serverKey    = "server.key"
	// certLifetime covers a run and a demo left up for days; the certificates are made anew
	// by every bring-up.
	certLifetime = 30 * 24 * time.Hour
)

// tlsDir is where the run's CAs and server certificates are: under the node's directory,
// which every bring-up purges and makes anew.
func (c config) tlsDir() string { return filepath.Join(c.NodeDir, "e2e-tls") }

// writePKI makes, under dir, a CA and a server certificate for ip in each of the
// subdirectories trusted and untrusted: ca.crt, server.crt and server.key (PEM).
func writePKI(dir string, ip net.IP, now time.Time) error {
	if ip == nil {
		return fmt.Errorf("the server's address is not an IP address")
	}
	for i, name := range []string{tlsTrusted, tlsUntrusted} {
		sub := filepath.Join(dir, name)
		if err := os.MkdirAll(sub, 0o700); err != nil {
			return err
		}
		ca, caKey, caDER, err := newCA("provider-kvm e2e "+name+" CA", int64(2*i+1), now)
		if err != nil {
			return fmt.Errorf("%s CA: %w", name, err)
		}
		srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(2*i + 2)),
			Subject:      pkix.Name{CommonName: ip.String()},
			IPAddresses:  []net.IP{ip},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(certLifetime),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		srvDER, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &srvKey.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("%s server certificate: %w", name, err)
		}
		keyDER, err := x509.MarshalECPrivateKey(srvKey)
		if err != nil {
			return err
		}
		for _, f := range []struct {
			file, typ string
			der       []byte
			mode      os.FileMode
		}{
			{caCertFile, "CERTIFICATE", caDER, 0o644},
			{serverCert, "CERTIFICATE", srvDER, 0o644},
			{serverKey, "EC PRIVATE KEY", keyDER, 0o600},
		} {
			b := pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der})
			if err := os.WriteFile(filepath.Join(sub, f.file), b, f.mode); err != nil {
				return err
			}
		}
	}
	return nil
}

// newCA is a self-signed CA certificate and its key.
func newCA(cn string, serial int64, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return ca, key, der, nil
}

// serverTLS is the TLS configuration of the server whose certificate is under dir/name.
func serverTLS(dir, name string) (*tls.Config, error) {
	sub := filepath.Join(dir, name)
	cert, err := tls.LoadX509KeyPair(filepath.Join(sub, serverCert), filepath.Join(sub, serverKey))
	if err != nil {
		return nil, fmt.Errorf("the %s HTTPS server's certificate: %w", name, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// caPool is the pool of the CA under dir/name.
func caPool(dir, name string) (*x509.CertPool, error) {
	b, err := os.ReadFile(filepath.Join(dir, name, caCertFile))
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate", filepath.Join(dir, name, caCertFile))
	}
	return p, nil
}

// pki is e2ectl pki DIR IP: the run's CAs and server certificates (writePKI).
func pki(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: e2ectl pki DIR IP")
	}
	return writePKI(args[0], net.ParseIP(args[1]), time.Now())
}
