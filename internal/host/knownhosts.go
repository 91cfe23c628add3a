package host

import (
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

const (
	errParseKnownHosts = "cannot parse known_hosts data"

	markerCA = "cert-authority"
)

// HostKeyReason tells why a host key was refused.
type HostKeyReason string

// Reasons for a HostKeyError.
const (
	// HostKeyUnknown means no known_hosts entry names the host.
	HostKeyUnknown HostKeyReason = "Unknown"
	// HostKeyMismatch means known_hosts names the host with other keys.
	HostKeyMismatch HostKeyReason = "Mismatch"
	// HostKeyRevoked means the presented key is marked @revoked.
	HostKeyRevoked HostKeyReason = "Revoked"
	// HostKeyCertificate means the server presented a certificate that was refused.
	HostKeyCertificate HostKeyReason = "Certificate"
)

// HostKeyError is returned when an SSH server's host key is not accepted.
// Use IsHostKeyError to detect it in a wrapped error.
type HostKeyError struct {
	// Reason tells why the key was refused.
	Reason HostKeyReason
	// Host is the name looked up in known_hosts: host, or [host]:port.
	Host string
	// Presented is the server's key: type and SHA256 fingerprint.
	Presented string
	// Known lists the keys known_hosts pins for Host (type and SHA256
	// fingerprint); empty when the host is unknown.
	Known []string
	// Detail says why a certificate was refused.
	Detail string `json:",omitempty"`
}

// Error names the host and both fingerprints.
func (e *HostKeyError) Error() string {
	switch e.Reason {
	case HostKeyMismatch:
		return "host key mismatch for " + e.Host + ": server presented " + e.Presented +
			", known_hosts expects " + strings.Join(e.Known, " or ")
	case HostKeyRevoked:
		return "host key of " + e.Host + " is revoked in known_hosts: server presented " + e.Presented
	case HostKeyCertificate:
		return "host certificate of " + e.Host + " refused: " + e.Detail
	default:
		return "host key of " + e.Host + " is unknown: server presented " + e.Presented +
			", no known_hosts entry matches " + e.Host + " (no trust on first use: add the key to known_hosts)"
	}
}

// IsHostKeyError reports whether err, or an error it wraps, is a
// *HostKeyError.
func IsHostKeyError(err error) bool {
	var hk *HostKeyError
	return errors.As(err, &hk)
}

// knownHosts is parsed known_hosts data, matched by golang.org/x/crypto/ssh/knownhosts
// (plain, wildcard, negated and hashed patterns, @revoked, @cert-authority).
type knownHosts = *knownHostsDB

// knownHostsDB is what knownHosts points to; a nil knownHosts knows no host.
type knownHostsDB struct {
	// check is the library's callback; nil when no data was given (every key is unknown).
	check0 ssh.HostKeyCallback
	// cas are the keys of @cert-authority lines, to tell them from pinned keys.
	cas map[string]bool
}

// parseKnownHosts parses known_hosts data held in memory. The library reads files only, so
// the data is handed to it through a pipe (/proc/self/fd): nothing is written to disk, and a
// read-only root filesystem does not matter.
func parseKnownHosts(data []byte) (knownHosts, error) {
	kh := &knownHostsDB{cas: map[string]bool{}}
	for rest := data; len(rest) > 0; {
		marker, _, key, _, r, err := ssh.ParseKnownHosts(rest)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errors.Wrap(err, errParseKnownHosts)
		}
		if marker == markerCA {
			kh.cas[string(key.Marshal())] = true
		}
		rest = r
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, errors.Wrap(err, errParseKnownHosts)
	}
	defer rd.Close() //nolint:errcheck // read side; the library has read it all
	go func() {
		_, _ = wr.Write(data)
		_ = wr.Close()
	}()
	cb, err := knownhosts.New("/proc/self/fd/" + strconv.Itoa(int(rd.Fd())))
	if err != nil {
		return nil, errors.Wrap(err, errParseKnownHosts)
	}
	kh.check0 = cb
	return kh, nil
}

// knownHostsName is the name OpenSSH looks up: host for port 22,
// [host]:port otherwise.
func knownHostsName(host string, port int) string {
	if port == 0 || port == DefaultPort {
		return host
	}
	return "[" + host + "]:" + strconv.Itoa(port)
}

// address turns a known_hosts name back into host:port, the form the library takes.
func address(name string) string {
	if h, p, err := net.SplitHostPort(name); err == nil && strings.HasPrefix(name, "[") {
		return net.JoinHostPort(h, p)
	}
	return net.JoinHostPort(name, strconv.Itoa(DefaultPort))
}

// keyString is "TYPE SHA256:fingerprint".
func keyString(k ssh.PublicKey) string {
	return k.Type() + " " + ssh.FingerprintSHA256(k)
}

// lookup runs the library's check of key for name. The library prefers the name it is given
// over the remote address, so the address dialed (which may differ: a jump, a NAT) is not
// looked up; a placeholder stands in for it.
func (kh knownHosts) lookup(name string, key ssh.PublicKey) error {
	if kh == nil || kh.check0 == nil {
		return &knownhosts.KeyError{}
	}
	return kh.check0(address(name), &net.TCPAddr{IP: net.IPv4zero, Port: DefaultPort}, key)
}

// check verifies key for name, and says why a key is refused in a HostKeyError.
func (kh knownHosts) check(name string, key ssh.PublicKey) error {
	err := kh.lookup(name, key)
	if err == nil {
		return nil
	}
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	switch {
	case errors.As(err, &re):
		return &HostKeyError{Reason: HostKeyRevoked, Host: name, Presented: keyString(key)}
	case errors.As(err, &ke) && len(ke.Want) == 0:
		return &HostKeyError{Reason: HostKeyUnknown, Host: name, Presented: keyString(key)}
	case errors.As(err, &ke):
		known := make([]string, 0, len(ke.Want))
		for _, w := range ke.Want {
			known = append(known, keyString(w.Key))
		}
		return &HostKeyError{Reason: HostKeyMismatch, Host: name, Presented: keyString(key), Known: known}
	}
	// A certificate refused (expired, wrong principal, not signed by a known authority).
	return &HostKeyError{Reason: HostKeyCertificate, Host: name, Presented: keyString(key), Detail: err.Error()}
}

// placeholderKey is a key no known_hosts pins: looking it up lists the keys pinned for a name.
var placeholderKey ssh.PublicKey = placeholder{}

type placeholder struct{}

func (placeholder) Type() string                        { return "placeholder" }
func (placeholder) Marshal() []byte                     { return []byte("provider-kvm placeholder key") }
func (placeholder) Verify([]byte, *ssh.Signature) error { return errors.New("placeholder") }

// algorithms lists host key algorithms for the keys pinned for name, so the
// server presents a key we know: certificate algorithms first when an @cert-authority line
// covers name. Nil lets the SSH library choose.
func (kh knownHosts) algorithms(name string) []string {
	var ke *knownhosts.KeyError
	if !errors.As(kh.lookup(name, placeholderKey), &ke) {
		return nil
	}
	var out []string
	add := func(a ...string) {
		for _, x := range a {
			if !slices.Contains(out, x) {
				out = append(out, x)
			}
		}
	}
	for _, w := range ke.Want {
		if kh != nil && kh.cas[string(w.Key.Marshal())] {
			add(ssh.CertAlgoED25519v01, ssh.CertAlgoECDSA256v01, ssh.CertAlgoECDSA384v01, ssh.CertAlgoECDSA521v01,
				ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01)
		}
	}
	for _, w := range ke.Want {
		switch {
		case kh != nil && kh.cas[string(w.Key.Marshal())]:
		case w.Key.Type() == ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			add(w.Key.Type())
		}
	}
	return out
}

// hostKeyCallback pins the host key of host:port to kh. It records the
// presented key's fingerprint in *seen.
func hostKeyCallback(kh knownHosts, host string, port int, insecure bool, seen *string) ssh.HostKeyCallback {
	name := knownHostsName(host, port)
	return func(_ string, _ net.Addr, key ssh.PublicKey) error {
		*seen = ssh.FingerprintSHA256(key)
		if insecure {
			return nil
		}
		return kh.check(name, key)
	}
}
