package host

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestConfigDefaultsAndAddress(t *testing.T) {
	got := Config{Host: "h"}.WithDefaults()
	want := Config{Transport: TransportSSH, Host: "h", Port: 22, User: "root", Socket: DefaultSocket, URI: DefaultURI}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("WithDefaults(): -want, +got:\n%s", diff)
	}
	cases := map[string]struct {
		c    Config
		want string
	}{
		"SSH":  {c: Config{Host: "127.0.0.1", Port: 2222}, want: "root@127.0.0.1:2222"},
		"IPv6": {c: Config{Host: "::1", User: "u"}, want: "u@[::1]:22"},
		"Unix": {c: Config{Transport: TransportUnix}, want: "unix:" + DefaultSocket},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.c.Address()); diff != "" {
				t.Errorf("Address(): -want, +got:\n%s", diff)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	key := []byte("k")
	cases := map[string]struct {
		c    Config
		want string
	}{
		"OK":          {c: Config{Host: "h", PrivateKey: key, KnownHosts: []byte("x")}},
		"Insecure":    {c: Config{Host: "h", PrivateKey: key, InsecureSkipHostKeyVerification: true}},
		"Unix":        {c: Config{Transport: TransportUnix}},
		"NoHost":      {c: Config{PrivateKey: key, KnownHosts: key}, want: errNoHost},
		"NoKey":       {c: Config{Host: "h", KnownHosts: key}, want: errNoPrivateKey},
		"NoKnown":     {c: Config{Host: "h", PrivateKey: key}, want: errNoKnownHosts},
		"BadPort":     {c: Config{Host: "h", Port: 70000, PrivateKey: key, KnownHosts: key}, want: "port 70000 is out of range"},
		"BadTransprt": {c: Config{Transport: "TCP"}, want: `unknown transport "TCP": must be SSH or Unix`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ""
			if err := tc.c.Validate(); err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Validate(): -want, +got:\n%s", diff)
			}
		})
	}
}

func TestPoolKey(t *testing.T) {
	base := Config{Host: "h", Port: 2222, User: "root", PrivateKey: []byte("KEY-SECRET"), KnownHosts: []byte("kh")}
	mod := func(f func(*Config)) Config { c := base; f(&c); return c }
	cases := map[string]struct {
		c    Config
		same bool
	}{
		"Same":               {c: mod(func(*Config) {}), same: true},
		"SameAfterDefaults":  {c: mod(func(c *Config) { c.Transport = TransportSSH; c.Socket = DefaultSocket; c.URI = DefaultURI }), same: true},
		"OtherKey":           {c: mod(func(c *Config) { c.PrivateKey = []byte("KEY-OTHER") })},
		"OtherKnownHosts":    {c: mod(func(c *Config) { c.KnownHosts = []byte("kh2") })},
		"OtherPassphrase":    {c: mod(func(c *Config) { c.Passphrase = []byte("p") })},
		"OtherHost":          {c: mod(func(c *Config) { c.Host = "h2" })},
		"OtherPort":          {c: mod(func(c *Config) { c.Port = 22 })},
		"OtherUser":          {c: mod(func(c *Config) { c.User = "u" })},
		"Insecure":           {c: mod(func(c *Config) { c.InsecureSkipHostKeyVerification = true })},
		"OtherURI":           {c: mod(func(c *Config) { c.URI = "test:///default" })},
		"FieldBoundaryShift": {c: mod(func(c *Config) { c.Host = "h2"; c.User = "oot" })},
	}
	k0 := base.connKey()
	if len(k0) != 64 {
		t.Fatalf("connKey length %d, want 64 hex chars", len(k0))
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			k := tc.c.connKey()
			if diff := cmp.Diff(tc.same, k == k0); diff != "" {
				t.Errorf("connKey equal: -want, +got:\n%s", diff)
			}
			if cmp.Equal(k, string(base.PrivateKey)) {
				t.Error("connKey holds the secret")
			}
		})
	}
}
