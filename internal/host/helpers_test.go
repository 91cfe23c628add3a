package host

import (
	"crypto/rand"
	"crypto/rsa"
	"testing"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"golang.org/x/crypto/ssh"
)

func errorsAs(err error, target any) bool { return errors.As(err, target) }

func errPlain(s string) error { return errors.New(s) }

func wrapTwice(err error) error {
	return errors.Wrap(errors.Wrap(err, "cannot establish SSH session"), "cannot connect to libvirt host root@127.0.0.1:2222")
}

func newRSASigner(t *testing.T) ssh.Signer {
	t.Helper()
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func sprintf(format string, args ...any) string { return errors.Errorf(format, args...).Error() }
