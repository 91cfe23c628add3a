package host

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"
)

func pemKey(t *testing.T, k crypto.PrivateKey, passphrase string) []byte {
	t.Helper()
	var b *pem.Block
	var err error
	if passphrase == "" {
		b, err = ssh.MarshalPrivateKey(k, "test")
	} else {
		b, err = ssh.MarshalPrivateKeyWithPassphrase(k, "test", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(b)
}

func TestParseSigner(t *testing.T) {
	_, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	ecPriv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rsaPriv, _ := rsa.GenerateKey(rand.Reader, 2048)
	const pass = "s3cret-Passphrase-42"

	type want struct {
		keyType string
		algos   []string // for MultiAlgorithmSigner
		err     string
	}
	cases := map[string]struct {
		key  []byte
		pass string
		want want
	}{
		"Ed25519":     {key: pemKey(t, edPriv, ""), want: want{keyType: ssh.KeyAlgoED25519}},
		"ECDSA":       {key: pemKey(t, ecPriv, ""), want: want{keyType: ssh.KeyAlgoECDSA256}},
		"RSA":         {key: pemKey(t, rsaPriv, ""), want: want{keyType: ssh.KeyAlgoRSA, algos: []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}}},
		"RSAEnc":      {key: pemKey(t, rsaPriv, pass), pass: pass, want: want{keyType: ssh.KeyAlgoRSA, algos: []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}}},
		"Passphrase":  {key: pemKey(t, edPriv, pass), pass: pass, want: want{keyType: ssh.KeyAlgoED25519}},
		"UnusedPass":  {key: pemKey(t, edPriv, ""), pass: pass, want: want{keyType: ssh.KeyAlgoED25519}},
		"WrongPass":   {key: pemKey(t, edPriv, pass), pass: "wrong-" + pass, want: want{err: errKeyWrongPass}},
		"MissingPass": {key: pemKey(t, edPriv, pass), want: want{err: errKeyNeedsPass}},
		"Garbage":     {key: []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAsecretbytes\n-----END OPENSSH PRIVATE KEY-----\n"), want: want{err: errKeyParse}},
		"Truncated":   {key: pemKey(t, edPriv, "")[:120], want: want{err: errKeyParse}},
		"Empty":       {want: want{err: errNoPrivateKey}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := parseSigner(tc.key, []byte(tc.pass))
			got := want{}
			if err != nil {
				got.err = err.Error()
				// No secret may leak into the error.
				if tc.pass != "" && strings.Contains(got.err, tc.pass) {
					t.Errorf("error %q contains the passphrase", got.err)
				}
				for _, l := range strings.Split(string(tc.key), "\n") {
					if len(l) >= 8 && !strings.HasPrefix(l, "-----") && strings.Contains(got.err, l) {
						t.Errorf("error %q contains key material %q", got.err, l)
					}
				}
			} else {
				got.keyType = s.PublicKey().Type()
				if ms, ok := s.(ssh.MultiAlgorithmSigner); ok && got.keyType == ssh.KeyAlgoRSA {
					got.algos = ms.Algorithms()
				}
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("parseSigner(...): -want, +got:\n%s", diff)
			}
		})
	}
}

func TestRSASignerSignsWithSHA2(t *testing.T) {
	rsaPriv, _ := rsa.GenerateKey(rand.Reader, 2048)
	s, err := parseSigner(pemKey(t, rsaPriv, ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	ms := s.(ssh.MultiAlgorithmSigner)
	for _, a := range []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256} {
		sig, err := ms.SignWithAlgorithm(rand.Reader, []byte("data"), a)
		if err != nil {
			t.Fatalf("SignWithAlgorithm(%s): %v", a, err)
		}
		if diff := cmp.Diff(a, sig.Format); diff != "" {
			t.Errorf("signature format: -want, +got:\n%s", diff)
		}
	}
	if _, err := ms.SignWithAlgorithm(rand.Reader, []byte("data"), ssh.KeyAlgoRSA); err == nil {
		t.Error("SignWithAlgorithm(ssh-rsa): want error, SHA-1 must not be offered")
	}
}
