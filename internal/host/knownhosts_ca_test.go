package host

import (
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"
)

// TestKnownHostsCertAuthority: a host certificate signed by an @cert-authority of known_hosts
// is accepted for the names it covers and refused (with the library's reason) otherwise; the
// certificate algorithms are asked for first.
func TestKnownHostsCertAuthority(t *testing.T) {
	_, caPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := ssh.NewSignerFromKey(caPriv)
	if err != nil {
		t.Fatal(err)
	}
	cert := &ssh.Certificate{Key: newEd25519(t), CertType: ssh.HostCert, ValidPrincipals: []string{"kvm1.example.com"},
		ValidBefore: ssh.CertTimeInfinity, Serial: 1}
	if err := cert.SignCert(rand.Reader, ca); err != nil {
		t.Fatal(err)
	}
	kh, err := parseKnownHosts([]byte(line("@cert-authority", "*.example.com", ca.PublicKey(), false) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := kh.check("kvm1.example.com", cert); err != nil {
		t.Errorf("a certificate signed by the authority for its principal: %v", err)
	}
	err = kh.check("kvm2.example.com", cert)
	var hk *HostKeyError
	if !IsHostKeyError(err) || !asHostKeyError(err, &hk) || hk.Reason != HostKeyCertificate || !strings.Contains(hk.Error(), "kvm2.example.com") {
		t.Errorf("a certificate for another principal: want a HostKeyError with reason Certificate naming the host, got %v", err)
	}
	if err := kh.check("kvm1.example.com", newEd25519(t)); !IsHostKeyError(err) {
		t.Errorf("a plain key where only an authority is known: want a HostKeyError, got %v", err)
	}
	want := []string{ssh.CertAlgoED25519v01, ssh.CertAlgoECDSA256v01, ssh.CertAlgoECDSA384v01, ssh.CertAlgoECDSA521v01,
		ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01}
	if diff := cmp.Diff(want, kh.algorithms("kvm1.example.com")); diff != "" {
		t.Errorf("algorithms: -want, +got:\n%s", diff)
	}
}

func asHostKeyError(err error, hk **HostKeyError) bool {
	e, ok := err.(*HostKeyError)
	*hk = e
	return ok
}
