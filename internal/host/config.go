package host

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net"
	"strconv"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
)

// Transport selects how the provider reaches a host's libvirt daemon.
type Transport string

const (
	// TransportSSH carries libvirt's RPC over an SSH connection to the
	// host's libvirt unix socket. It is the default.
	TransportSSH Transport = "SSH"
	// TransportUnix dials the libvirt unix socket directly; use it when the
	// provider runs on the libvirt host itself.
	TransportUnix Transport = "Unix"
)

// Defaults applied to an empty Config field.
const (
	DefaultPort   = 22
	DefaultUser   = "root"
	DefaultSocket = "/var/run/libvirt/libvirt-sock"
	DefaultURI    = "qemu:///system"
)

const (
	errUnknownTransport = "unknown transport %q: must be SSH or Unix"
	errNoHost           = "no host given"
	errBadPort          = "port %d is out of range"
	errNoPrivateKey     = "no SSH private key given"
	errNoKnownHosts     = "no known_hosts data given: host keys are pinned; set insecureSkipHostKeyVerification to skip the check"
)

// Config describes one libvirt host and how to reach it. Secrets
// (PrivateKey, Passphrase) never appear in errors or logs.
type Config struct {
	// Transport is SSH (default) or Unix.
	Transport Transport

	// Host is the SSH server's name or address.
	Host string
	// Port is the SSH port, default 22.
	Port int
	// User is the SSH user, default root.
	User string

	// PrivateKey is the user's private key in PEM or OpenSSH format
	// (ed25519, RSA, ECDSA).
	PrivateKey []byte
	// Passphrase decrypts PrivateKey when it is encrypted.
	Passphrase []byte
	// KnownHosts holds known_hosts lines (plain or hashed host patterns,
	// "[host]:port" for non-default ports) that pin the host key.
	KnownHosts []byte
	// InsecureSkipHostKeyVerification accepts any host key. Callers should
	// warn every time such a connection is opened: see WithOnOpen.
	InsecureSkipHostKeyVerification bool

	// Socket is libvirt's unix socket on the host, default
	// /var/run/libvirt/libvirt-sock.
	Socket string
	// URI is the libvirt connection URI opened on the host, default
	// qemu:///system.
	URI string
}

// WithDefaults returns a copy of c with defaults filled in.
func (c Config) WithDefaults() Config {
	if c.Transport == "" {
		c.Transport = TransportSSH
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.User == "" {
		c.User = DefaultUser
	}
	if c.Socket == "" {
		c.Socket = DefaultSocket
	}
	if c.URI == "" {
		c.URI = DefaultURI
	}
	return c
}

// Validate reports whether c, after defaults, can be used to connect.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch c.Transport {
	case TransportUnix:
		return nil
	case TransportSSH:
	default:
		return errors.Errorf(errUnknownTransport, c.Transport)
	}
	if c.Host == "" {
		return errors.New(errNoHost)
	}
	if c.Port < 1 || c.Port > 65535 {
		return errors.Errorf(errBadPort, c.Port)
	}
	if len(c.PrivateKey) == 0 {
		return errors.New(errNoPrivateKey)
	}
	if len(c.KnownHosts) == 0 && !c.InsecureSkipHostKeyVerification {
		return errors.New(errNoKnownHosts)
	}
	return nil
}

// Address names the host for messages: user@host:port, or unix:SOCKET for
// the Unix transport. It never contains secrets.
func (c Config) Address() string {
	c = c.WithDefaults()
	if c.Transport == TransportUnix {
		return "unix:" + c.Socket
	}
	return c.User + "@" + net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
}

// Key identifies the pooled connection c is served by (State.Key): a SHA-256 over every field
// that identifies a connection, so it holds no secret in plain text.
func (c Config) Key() string { return c.connKey() }

// connKey is a SHA-256 over every field that identifies a connection, so
// that the map keys of Connections hold no secret in plain text. A changed key,
// passphrase or known_hosts gives a different connection.
func (c Config) connKey() string {
	c = c.WithDefaults()
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	insecure := "0"
	if c.InsecureSkipHostKeyVerification {
		insecure = "1"
	}
	for _, f := range [][]byte{
		[]byte(c.Transport), []byte(c.Host), []byte(strconv.Itoa(c.Port)), []byte(c.User),
		c.PrivateKey, c.Passphrase, c.KnownHosts, []byte(insecure), []byte(c.Socket), []byte(c.URI),
	} {
		field(f)
	}
	return hex.EncodeToString(h.Sum(nil))
}
