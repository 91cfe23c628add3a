package host

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // known_hosts hashing is defined as HMAC-SHA1.
	"encoding/base64"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"golang.org/x/crypto/ssh"
)

const (
	errParseKnownHosts = "cannot parse known_hosts data"

	markerRevoked = "revoked"
	markerCA      = "cert-authority"
	hashMagic     = "|1|"
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
}

// Error names the host and both fingerprints.
func (e *HostKeyError) Error() string {
	switch e.Reason {
	case HostKeyMismatch:
		return "host key mismatch for " + e.Host + ": server presented " + e.Presented +
			", known_hosts expects " + strings.Join(e.Known, " or ")
	case HostKeyRevoked:
		return "host key of " + e.Host + " is revoked in known_hosts: server presented " + e.Presented
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

// knownHost is one parsed known_hosts line.
type knownHost struct {
	marker   string
	patterns []string
	key      ssh.PublicKey
}

// knownHosts is parsed known_hosts data, matched in memory.
type knownHosts []knownHost

// parseKnownHosts parses known_hosts data held in memory.
func parseKnownHosts(data []byte) (knownHosts, error) {
	var out knownHosts
	rest := data
	for len(rest) > 0 {
		marker, hosts, key, _, r, err := ssh.ParseKnownHosts(rest)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errors.Wrap(err, errParseKnownHosts)
		}
		out = append(out, knownHost{marker: marker, patterns: hosts, key: key})
		rest = r
	}
	return out, nil
}

// knownHostsName is the name OpenSSH looks up: host for port 22,
// [host]:port otherwise.
func knownHostsName(host string, port int) string {
	if port == 0 || port == DefaultPort {
		return host
	}
	return "[" + host + "]:" + strconv.Itoa(port)
}

// matches reports whether a line's host patterns select name: any positive
// pattern (plain, wildcard or hashed) matches and no negated one does.
func (k knownHost) matches(name string) bool {
	ok := false
	for _, p := range k.patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		if !patternMatches(p, name) {
			continue
		}
		if neg {
			return false
		}
		ok = true
	}
	return ok
}

func patternMatches(pattern, name string) bool {
	if strings.HasPrefix(pattern, hashMagic) {
		return hashedMatches(pattern, name)
	}
	return wildcardMatch(strings.ToLower(pattern), strings.ToLower(name))
}

// hashedMatches checks a |1|salt|hash pattern: hash = HMAC-SHA1(salt, name).
func hashedMatches(pattern, name string) bool {
	parts := strings.Split(strings.TrimPrefix(pattern, hashMagic), "|")
	if len(parts) != 2 {
		return false
	}
	salt, err := base64.StdEncoding.DecodeString(parts[0])
	if err != nil {
		return false
	}
	want, err := base64.StdEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	mac := hmac.New(sha1.New, salt)
	mac.Write([]byte(name))
	return hmac.Equal(mac.Sum(nil), want)
}

// wildcardMatch matches OpenSSH host patterns: '*' any run, '?' one byte.
func wildcardMatch(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := 0; i <= len(s); i++ {
				if wildcardMatch(p[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
		default:
			if len(s) == 0 || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return len(s) == 0
}

// keyString is "TYPE SHA256:fingerprint".
func keyString(k ssh.PublicKey) string {
	return k.Type() + " " + ssh.FingerprintSHA256(k)
}

// check verifies key for name; @cert-authority lines are not supported and
// ignored.
func (kh knownHosts) check(name string, key ssh.PublicKey) error {
	presented := key.Marshal()
	var known []string
	for _, e := range kh {
		if !e.matches(name) {
			continue
		}
		switch e.marker {
		case markerRevoked:
			if bytes.Equal(e.key.Marshal(), presented) {
				return &HostKeyError{Reason: HostKeyRevoked, Host: name, Presented: keyString(key)}
			}
			continue
		case markerCA:
			continue
		}
		known = append(known, keyString(e.key))
	}
	for _, e := range kh {
		if e.marker == "" && e.matches(name) && bytes.Equal(e.key.Marshal(), presented) {
			return nil
		}
	}
	if len(known) == 0 {
		return &HostKeyError{Reason: HostKeyUnknown, Host: name, Presented: keyString(key)}
	}
	return &HostKeyError{Reason: HostKeyMismatch, Host: name, Presented: keyString(key), Known: known}
}

// algorithms lists host key algorithms for the keys pinned for name, so the
// server presents a key we know. Nil lets the SSH library choose.
func (kh knownHosts) algorithms(name string) []string {
	var out []string
	add := func(a ...string) {
		for _, x := range a {
			found := false
			for _, y := range out {
				found = found || x == y
			}
			if !found {
				out = append(out, x)
			}
		}
	}
	for _, e := range kh {
		if e.marker != "" || !e.matches(name) {
			continue
		}
		if e.key.Type() == ssh.KeyAlgoRSA {
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
			continue
		}
		add(e.key.Type())
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
