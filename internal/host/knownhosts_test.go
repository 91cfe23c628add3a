package host

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/crossplane/crossplane-runtime/v2/pkg/test"
)

func newEd25519(t *testing.T) ssh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newECDSA(t *testing.T) ssh.PublicKey {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// line builds a known_hosts line; hashed uses x/crypto's own hashing as an
// independent reference for ours.
func line(marker, pattern string, k ssh.PublicKey, hashed bool) string {
	if hashed {
		pattern = knownhosts.HashHostname(pattern)
	}
	l := pattern + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
	if marker != "" {
		l = marker + " " + l
	}
	return l
}

func TestKnownHostsCheck(t *testing.T) {
	server := newEd25519(t)
	other := newEd25519(t)
	ec := newECDSA(t)
	fp := keyString

	unknown := func(host string) error {
		return &HostKeyError{Reason: HostKeyUnknown, Host: host, Presented: fp(server)}
	}
	mismatch := func(host string, known ...ssh.PublicKey) error {
		e := &HostKeyError{Reason: HostKeyMismatch, Host: host, Presented: fp(server)}
		for _, k := range known {
			e.Known = append(e.Known, fp(k))
		}
		return e
	}
	cases := map[string]struct {
		known string
		host  string
		port  int
		key   ssh.PublicKey
		want  error // nil: accepted
	}{
		"PlainDefaultPort": {
			known: line("", "10.0.0.1", server, false), host: "10.0.0.1", port: 22, key: server,
		},
		"BracketPort": {
			known: line("", "[127.0.0.1]:2222", server, false), host: "127.0.0.1", port: 2222, key: server,
		},
		"PlainEntryDoesNotCoverOtherPort": {
			known: line("", "127.0.0.1", server, false), host: "127.0.0.1", port: 2222, key: server,
			want: unknown("[127.0.0.1]:2222"),
		},
		"Hashed": {
			known: line("", "kvm1.example.com", server, true), host: "kvm1.example.com", port: 22, key: server,
		},
		"HashedBracketPort": {
			known: line("", "[127.0.0.1]:2222", server, true), host: "127.0.0.1", port: 2222, key: server,
		},
		"HashedOtherHost": {
			known: line("", "[127.0.0.2]:2222", server, true), host: "127.0.0.1", port: 2222, key: server,
			want: unknown("[127.0.0.1]:2222"),
		},
		"CommaListAndComments": {
			known: "# comment\n\n" + "kvm1,10.0.0.1 " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(server))) + " c\n",
			host:  "10.0.0.1", port: 22, key: server,
		},
		"Wildcard": {
			known: line("", "*.example.com", server, false), host: "kvm1.example.com", port: 22, key: server,
		},
		"Negated": {
			known: "*.example.com,!bad.example.com " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(server))),
			host:  "bad.example.com", port: 22, key: server,
			want: unknown("bad.example.com"),
		},
		"Mismatch": {
			known: line("", "[127.0.0.1]:2222", other, false), host: "127.0.0.1", port: 2222, key: server,
			want: mismatch("[127.0.0.1]:2222", other),
		},
		"HashedMismatch": {
			known: line("", "[127.0.0.1]:2222", other, true), host: "127.0.0.1", port: 2222, key: server,
			want: mismatch("[127.0.0.1]:2222", other),
		},
		"MultipleKeyTypesOneMatches": {
			known: line("", "[h]:2222", ec, false) + "\n" + line("", "[h]:2222", server, true) + "\n",
			host:  "h", port: 2222, key: server,
		},
		"MultipleKeyTypesNoneMatches": {
			known: line("", "[h]:2222", ec, false) + "\n" + line("", "[h]:2222", other, false) + "\n",
			host:  "h", port: 2222, key: server,
			want: mismatch("[h]:2222", ec, other),
		},
		"Revoked": {
			known: line("@revoked", "*", server, false) + "\n" + line("", "h", server, false),
			host:  "h", port: 22, key: server,
			want: &HostKeyError{Reason: HostKeyRevoked, Host: "h", Presented: fp(server)},
		},
		"Empty": {
			known: "", host: "h", port: 22, key: server,
			want: unknown("h"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			kh, err := parseKnownHosts([]byte(tc.known))
			if err != nil {
				t.Fatalf("parseKnownHosts: %v", err)
			}
			err = kh.check(knownHostsName(tc.host, tc.port), tc.key)
			if diff := cmp.Diff(tc.want, err, test.EquateErrors()); diff != "" {
				t.Errorf("check(...): -want error, +got error:\n%s", diff)
			}
		})
	}
}

func TestHostKeyErrorMessage(t *testing.T) {
	e := &HostKeyError{Reason: HostKeyMismatch, Host: "[127.0.0.1]:2222", Presented: "ssh-ed25519 SHA256:AAA", Known: []string{"ssh-ed25519 SHA256:BBB"}}
	want := "host key mismatch for [127.0.0.1]:2222: server presented ssh-ed25519 SHA256:AAA, known_hosts expects ssh-ed25519 SHA256:BBB"
	if diff := cmp.Diff(want, e.Error()); diff != "" {
		t.Errorf("Error(): -want, +got:\n%s", diff)
	}
	wrapped := wrapTwice(e)
	if !IsHostKeyError(wrapped) {
		t.Errorf("IsHostKeyError(%q) = false", wrapped)
	}
	if IsHostKeyError(errPlain("x")) {
		t.Error("IsHostKeyError(plain) = true")
	}
}

func TestHostKeyAlgorithms(t *testing.T) {
	ed := newEd25519(t)
	ec := newECDSA(t)
	rsaKey := newRSASigner(t).PublicKey()
	known := strings.Join([]string{
		line("", "[h]:2222", ec, false),
		line("", "[h]:2222", ed, true),
		line("", "[h]:2222", rsaKey, false),
		line("", "other", ed, false),
		line("@revoked", "[h]:2222", newEd25519(t), false),
	}, "\n")
	kh, err := parseKnownHosts([]byte(known))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		name string
		want []string
	}{
		"AllTypesForHost": {name: "[h]:2222", want: []string{ssh.KeyAlgoECDSA256, ssh.KeyAlgoED25519, ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}},
		"Other":           {name: "other", want: []string{ssh.KeyAlgoED25519}},
		"Unknown":         {name: "nope", want: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, kh.algorithms(tc.name)); diff != "" {
				t.Errorf("algorithms(%q): -want, +got:\n%s", tc.name, diff)
			}
		})
	}
}

func TestParseKnownHostsError(t *testing.T) {
	if _, err := parseKnownHosts([]byte("h ssh-ed25519 !!!notbase64\n")); err == nil {
		t.Error("parseKnownHosts(garbage): want error")
	}
}

func TestHostKeyCallbackInsecure(t *testing.T) {
	var seen string
	k := newEd25519(t)
	cb := hostKeyCallback(nil, "h", 22, true, &seen)
	if err := cb("h:22", nil, k); err != nil {
		t.Errorf("insecure callback: %v", err)
	}
	if diff := cmp.Diff(ssh.FingerprintSHA256(k), seen); diff != "" {
		t.Errorf("seen fingerprint: -want, +got:\n%s", diff)
	}
	cb = hostKeyCallback(nil, "h", 22, false, &seen)
	if err := cb("h:22", nil, k); !IsHostKeyError(err) {
		t.Errorf("pinned callback without known_hosts: want HostKeyError, got %v", err)
	}
}
