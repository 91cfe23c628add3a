package host

import (
	"crypto/x509"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"golang.org/x/crypto/ssh"
)

// Messages about private keys are fixed strings: the parser's own errors are
// dropped so that no key material or passphrase can leak into an error.
const (
	errKeyParse         = "cannot parse SSH private key: not a valid PEM or OpenSSH private key"
	errKeyNeedsPass     = "cannot parse SSH private key: it is encrypted and no passphrase was given"
	errKeyWrongPass     = "cannot parse SSH private key: the passphrase is incorrect"
	errKeyUnsupported   = "cannot use SSH private key: unsupported key type"
	errRSAAlgorithms    = "cannot restrict RSA key to rsa-sha2-512/rsa-sha2-256"
	errNotAlgoSignerMsg = "RSA signer does not support algorithm selection"
)

// rsaAlgorithms are the signature algorithms offered for RSA user keys: the
// SHA-2 ones only, never SHA-1 ssh-rsa.
var rsaAlgorithms = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}

// parseSigner parses a private key (ed25519, RSA, ECDSA; PEM or OpenSSH
// format; optionally encrypted with passphrase). RSA keys sign with
// rsa-sha2-512 or rsa-sha2-256.
func parseSigner(key, passphrase []byte) (ssh.Signer, error) {
	if len(key) == 0 {
		return nil, errors.New(errNoPrivateKey)
	}
	s, err := ssh.ParsePrivateKey(key)
	var missing *ssh.PassphraseMissingError
	if errors.As(err, &missing) {
		if len(passphrase) == 0 {
			return nil, errors.New(errKeyNeedsPass)
		}
		s, err = ssh.ParsePrivateKeyWithPassphrase(key, passphrase)
		if errors.Is(err, x509.IncorrectPasswordError) {
			return nil, errors.New(errKeyWrongPass)
		}
	}
	if err != nil {
		return nil, errors.New(errKeyParse)
	}
	switch s.PublicKey().Type() {
	case ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521:
		return s, nil
	case ssh.KeyAlgoRSA:
		as, ok := s.(ssh.AlgorithmSigner)
		if !ok {
			return nil, errors.Wrap(errors.New(errNotAlgoSignerMsg), errRSAAlgorithms)
		}
		ms, err := ssh.NewSignerWithAlgorithms(as, rsaAlgorithms)
		if err != nil {
			return nil, errors.Wrap(err, errRSAAlgorithms)
		}
		return ms, nil
	default:
		return nil, errors.New(errKeyUnsupported)
	}
}
