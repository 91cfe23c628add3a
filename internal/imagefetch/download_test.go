package imagefetch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// fakeResolver maps host names to addresses; other names do not resolve.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// countingServer is a loopback test server that counts the requests it got.
type countingServer struct {
	*httptest.Server
	hits atomic.Int32
}

func newCountingServer(t *testing.T, h http.HandlerFunc) *countingServer {
	t.Helper()
	s := &countingServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// raw is an image of n bytes that does not look like qcow2.
func raw(n int) []byte { return bytes.Repeat([]byte("raw disk image. "), n/16) }

// fetch downloads rawURL as a publish does, into nothing: the guarded client, the stream with
// its size and stall limits, the same error classification; no libvirt.
func fetch(f *Fetcher, rawURL string) (int64, error) {
	d, err := f.Open(context.Background(), rawURL)
	if err != nil {
		return 0, err
	}
	cerr := d.Copy(FormatRaw, nil, func(_ context.Context, r io.Reader) error {
		_, err := io.Copy(io.Discard, struct{ io.Reader }{r})
		return err
	})
	if err := d.Close(); err != nil {
		return d.N(), err
	}
	return d.N(), cerr
}

func TestDownloadPolicy(t *testing.T) {
	img := raw(64 << 10)
	image := newCountingServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(img) })
	other := newCountingServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(img) })
	redirect := func(to string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to, http.StatusFound) }
	}
	port := strconv.Itoa(int(serverPort(t, image.Server)))
	toOther := newCountingServer(t, redirect(other.URL+"/img"))
	toMetadata := newCountingServer(t, redirect("http://metadata.test/latest/meta-data/"))
	toImage := newCountingServer(t, redirect(image.URL+"/img"))
	tlsToImage := httptest.NewTLSServer(redirect(image.URL + "/img"))
	t.Cleanup(tlsToImage.Close)
	loops := newCountingServer(t, redirect("/again"))

	resolver := fakeResolver{
		"images.test":   addrs("127.0.0.1"),
		"metadata.test": addrs("169.254.169.254"),
		"mixed.test":    addrs("169.254.169.254", "::ffff:127.0.0.1", "127.0.0.1"),
	}
	allowImage := allowServers(t, image.Server)
	withResolver := func(d *Downloads) { d.Resolver = resolver }

	type args struct {
		policy v1alpha1.ImageSourcePolicy
		url    string
		// useDefaultResolver resolves names with the system resolver instead of resolver.
		useDefaultResolver bool
	}
	type want struct {
		refused *RefusedError // nil when the download succeeds
		bytes   int64
		// untouched servers must not have seen a request.
		untouched []*countingServer
	}
	cases := map[string]struct {
		reason string
		args   args
		want   want
	}{
		"LoopbackRefusedByDefault": {
			reason: "A URL to 127.0.0.1 is refused by the built-in denial before anything is dialed.",
			args:   args{url: image.URL + "/img"},
			want: want{
				refused:   &RefusedError{URL: image.URL + "/img", Config: testConfig, Rule: "built-in: loopback 127.0.0.0/8"},
				untouched: []*countingServer{image},
			},
		},
		"ExactServerAllowed": {
			reason: "An allow rule with cidr 127.0.0.1/32 and the server's port lifts the denial for it.",
			args:   args{policy: allowImage, url: image.URL + "/img"},
			want:   want{bytes: int64(len(img))},
		},
		"OtherPortRefused": {
			reason: "The allow rule names one port: another server on loopback is still refused.",
			args:   args{policy: allowImage, url: other.URL + "/img"},
			want: want{
				refused:   &RefusedError{URL: other.URL + "/img", Config: testConfig, Rule: "built-in: loopback 127.0.0.0/8"},
				untouched: []*countingServer{other},
			},
		},
		"NameResolvingToLoopback": {
			reason: "A host name that resolves to 127.0.0.1 is refused on the address about to be dialed.",
			args:   args{url: "http://images.test:" + port + "/img"},
			want: want{
				refused:   &RefusedError{URL: "http://images.test:" + port + "/img", Addr: "127.0.0.1:" + port, Host: "images.test", Config: testConfig, Rule: "built-in: loopback 127.0.0.0/8"},
				untouched: []*countingServer{image},
			},
		},
		"AllowedNameResolvingToLoopback": {
			reason: "Allowing the host name does not lift the built-in denial of the address it resolves to.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Allow: []v1alpha1.ImageSourceRule{{Host: "images.test"}}},
				url:    "http://images.test:" + port + "/img",
			},
			want: want{
				refused: &RefusedError{URL: "http://images.test:" + port + "/img", Addr: "127.0.0.1:" + port, Host: "images.test", Config: testConfig,
					Rule: "built-in: loopback 127.0.0.0/8; allow[0] (host images.test) matches but only an allow rule whose cidr names this address lifts the built-in denial"},
				untouched: []*countingServer{image},
			},
		},
		"NameResolvingToAllowedServer": {
			reason: "A name resolving to the allowed server's address is allowed: the dialed address decides.",
			args:   args{policy: allowImage, url: "http://images.test:" + port + "/img"},
			want:   want{bytes: int64(len(img))},
		},
		"OnlyAllowedAddressesDialed": {
			reason: "Of the addresses a name resolves to, the refused ones are skipped and the allowed one dialed.",
			args:   args{policy: allowImage, url: "http://mixed.test:" + port + "/img"},
			want:   want{bytes: int64(len(img))},
		},
		"Localhost": {
			reason: "localhost resolves to loopback with the system resolver and is refused.",
			args:   args{url: "http://localhost:" + port + "/img", useDefaultResolver: true},
			want:   want{untouched: []*countingServer{image}},
		},
		"RedirectToRefusedServer": {
			reason: "A redirect to a server the policy refuses is refused.",
			args:   args{policy: allowServers(t, image.Server, toOther.Server), url: toOther.URL + "/"},
			want: want{
				refused:   &RefusedError{URL: other.URL + "/img", RedirectFrom: toOther.URL + "/", Config: testConfig, Rule: "built-in: loopback 127.0.0.0/8"},
				untouched: []*countingServer{other},
			},
		},
		"RedirectToNameResolvingToMetadata": {
			reason: "A redirect to a name that resolves to the metadata address is refused at the dial.",
			args:   args{policy: v1alpha1.ImageSourcePolicy{Allow: append(allowServers(t, toMetadata.Server).Allow, v1alpha1.ImageSourceRule{Host: "metadata.test"})}, url: toMetadata.URL + "/"},
			want: want{refused: &RefusedError{URL: "http://metadata.test/latest/meta-data/", Addr: "169.254.169.254:80", Host: "metadata.test", Config: testConfig,
				Rule: "built-in: link-local 169.254.0.0/16 (the cloud metadata address); allow[1] (host metadata.test) matches but only an allow rule whose cidr names this address lifts the built-in denial"}},
		},
		"RedirectNotMatchedByAllowRules": {
			reason: "A redirect no allow rule can match is refused by its URL, before it is resolved.",
			args:   args{policy: v1alpha1.ImageSourcePolicy{Allow: allowServers(t, toMetadata.Server).Allow}, url: toMetadata.URL + "/"},
			want:   want{refused: &RefusedError{URL: "http://metadata.test/latest/meta-data/", RedirectFrom: toMetadata.URL + "/", Config: testConfig, Rule: "not matched by any allow rule"}},
		},
		"RedirectToAllowedServer": {
			reason: "A redirect between allowed servers is followed.",
			args:   args{policy: allowServers(t, image.Server, toImage.Server), url: toImage.URL + "/"},
			want:   want{bytes: int64(len(img))},
		},
		"HTTPSToHTTP": {
			reason: "A redirect from https to http is refused even between allowed servers.",
			args:   args{policy: allowServers(t, image.Server, tlsToImage), url: tlsToImage.URL + "/"},
			want: want{
				refused:   &RefusedError{URL: image.URL + "/img", RedirectFrom: tlsToImage.URL + "/", Config: testConfig, Rule: "a redirect from https to http"},
				untouched: []*countingServer{image},
			},
		},
		"TooManyRedirects": {
			reason: "A redirect loop ends after 10 redirects.",
			args:   args{policy: allowServers(t, loops.Server), url: loops.URL + "/"},
			want:   want{refused: &RefusedError{URL: loops.URL + "/again", RedirectFrom: loops.URL + "/again", Config: testConfig, Rule: "more than 10 redirects"}},
		},
		"DeniedHost": {
			reason: "A deny rule refuses before anything is dialed.",
			args: args{
				policy: v1alpha1.ImageSourcePolicy{Allow: allowImage.Allow, Deny: []v1alpha1.ImageSourceRule{{URLPrefix: image.URL + "/private/"}}},
				url:    image.URL + "/private/img",
			},
			want: want{
				refused:   &RefusedError{URL: image.URL + "/private/img", Config: testConfig, Rule: "deny[0] (urlPrefix " + image.URL + "/private/)"},
				untouched: []*countingServer{image},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			mods := []func(*Downloads){withResolver}
			if tc.args.useDefaultResolver {
				mods = nil
			}
			c := New(downloadsFor(t, tc.args.policy, mods...))
			// Trust the TLS test server's certificate.
			c.http.Transport.(*guard).rt.(*http.Transport).TLSClientConfig = tlsToImage.Client().Transport.(*http.Transport).TLSClientConfig // ours
			before := map[*countingServer]int32{}
			for _, s := range tc.want.untouched {
				before[s] = s.hits.Load()
			}
			n, err := fetch(c, tc.args.url)
			for _, s := range tc.want.untouched {
				if s.hits.Load() != before[s] {
					t.Errorf("%s\nserver %s got a request", tc.reason, s.URL)
				}
			}
			if tc.args.useDefaultResolver {
				var re *RefusedError
				if !errorsAs(err, &re) || !strings.HasPrefix(re.Rule, "built-in: loopback") || re.Host != "localhost" {
					t.Errorf("%s\nfetch() error = %v, want a refusal of localhost by the built-in loopback denial", tc.reason, err)
				}
				return
			}
			var got *RefusedError
			if err != nil && !errorsAs(err, &got) {
				t.Fatalf("%s\nfetch() error = %v, want a *RefusedError or none", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want.refused, got); diff != "" {
				t.Errorf("%s\nfetch() refusal: -want, +got:\n%s", tc.reason, diff)
			}
			if got == nil && n != tc.want.bytes {
				t.Errorf("%s\nfetch() = %d bytes, want %d", tc.reason, n, tc.want.bytes)
			}
			if got != nil && !IsTerminal(err) {
				t.Errorf("%s\nIsTerminal(%v) = false", tc.reason, err)
			}
		})
	}
}

func TestRefusedErrorMessage(t *testing.T) {
	cases := map[string]struct {
		reason string
		err    *RefusedError
		want   string
	}{
		"BuiltInLiteral": {
			reason: "A refusal by the built-in denial names the rule and says how to allow exactly that server.",
			err:    &RefusedError{URL: "http://127.0.0.1:8080/img", Config: "ClusterProviderConfig/default", Rule: "built-in: loopback 127.0.0.0/8"},
			want: "the image source policy (imageSources of ClusterProviderConfig/default) refused http://127.0.0.1:8080/img: built-in: loopback 127.0.0.0/8; nothing was downloaded. " +
				"To allow exactly this server, add {cidr: 127.0.0.1/32, ports: [8080]} to imageSources.allow",
		},
		"BuiltInResolved": {
			reason: "A refused name says what it resolved to.",
			err:    &RefusedError{URL: "http://mirror.test/img", Host: "mirror.test", Addr: "[::1]:80", Config: "ProviderConfig/lab", Rule: "built-in: loopback ::1"},
			want: "the image source policy (imageSources of ProviderConfig/lab) refused http://mirror.test/img (mirror.test resolves to [::1]:80): built-in: loopback ::1; nothing was downloaded. " +
				"To allow exactly this server, add {cidr: ::1/128, ports: [80]} to imageSources.allow",
		},
		"Deny": {
			reason: "A deny rule is named; there is nothing to suggest.",
			err:    &RefusedError{URL: "https://x.example.org/a", Addr: "10.1.2.3:443", Config: "ClusterProviderConfig/default", Rule: "deny[2] (cidr 10.0.0.0/8)"},
			want:   "the image source policy (imageSources of ClusterProviderConfig/default) refused https://x.example.org/a (address 10.1.2.3:443): deny[2] (cidr 10.0.0.0/8); nothing was downloaded",
		},
		"Redirect": {
			reason: "A refused redirect names both URLs.",
			err:    &RefusedError{URL: "http://x.example.org/a", RedirectFrom: "https://x.example.org/a", Config: "ClusterProviderConfig/default", Rule: "a redirect from https to http"},
			want: "the image source policy (imageSources of ClusterProviderConfig/default) refused the redirect from https://x.example.org/a to http://x.example.org/a: a redirect from https to http; nothing was downloaded. " +
				"Point source.url at an https URL that does not redirect to http",
		},
		"NotAllowed": {
			reason: "A URL no allow rule matches says to add one.",
			err:    &RefusedError{URL: "https://other.example.org/a", Config: "ClusterProviderConfig/default", Rule: "not matched by any allow rule"},
			want: "the image source policy (imageSources of ClusterProviderConfig/default) refused https://other.example.org/a: not matched by any allow rule; nothing was downloaded. " +
				"Add an imageSources.allow rule (urlPrefix, host or cidr) that matches it, or use an allowed mirror",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.err.Error()); diff != "" {
				t.Errorf("%s\nError(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestDownloadLimits(t *testing.T) {
	quit := make(chan struct{})
	img := raw(3 << 20)
	mux := http.NewServeMux()
	mux.HandleFunc("/length", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(img)))
		_, _ = w.Write(img)
	})
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, _ *http.Request) {
		for off := 0; off < len(img); off += 64 << 10 {
			_, _ = w.Write(img[off : off+64<<10])
			w.(http.Flusher).Flush() // net/http's writer
		}
	})
	mux.HandleFunc("/exact", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(img[:1<<20])
		w.(http.Flusher).Flush() // net/http's writer
	})
	mux.HandleFunc("/no-headers", func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	})
	mux.HandleFunc("/stall", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(512<<10))
		_, _ = w.Write(img[:256<<10])
		w.(http.Flusher).Flush() // net/http's writer
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		// A byte every 400 ms for 2 s: slow, but never stalled for a second.
		for i := 0; i < 5; i++ {
			_, _ = w.Write([]byte{'x'})
			w.(http.Flusher).Flush() // net/http's writer
			select {
			case <-time.After(400 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(quit) }) // first: lets blocked handlers end

	type want struct {
		limit *LimitError // nil when the download succeeds
		msg   string      // the error's message, when limit is set
		bytes int64
	}
	cases := map[string]struct {
		reason string
		path   string
		want   want
	}{
		"AnnouncedTooLarge": {
			reason: "A Content-Length over the limit is refused before the body is read.",
			path:   "/length",
			want: want{
				limit: &LimitError{URL: srv.URL + "/length", Config: testConfig, Limit: LimitSize, MaxBytes: 1 << 20, Announced: 3 << 20},
				msg: "the image at " + srv.URL + "/length exceeds maxImageSizeMiB 1 of " + testConfig + ": the server announced 3145728 bytes; nothing was published. " +
					"Raise imageSources.maxImageSizeMiB if an image this large is expected",
			},
		},
		"StreamTooLarge": {
			reason: "Without Content-Length the bytes are counted on the stream.",
			path:   "/chunked",
			want: want{
				limit: &LimitError{URL: srv.URL + "/chunked", Config: testConfig, Limit: LimitSize, MaxBytes: 1 << 20},
				msg: "the image at " + srv.URL + "/chunked exceeds maxImageSizeMiB 1 of " + testConfig + ": more than 1048576 bytes arrived; nothing was published. " +
					"Raise imageSources.maxImageSizeMiB if an image this large is expected",
			},
		},
		"ExactlyTheLimit": {
			reason: "An image of exactly maxImageSizeMiB is accepted.",
			path:   "/exact",
			want:   want{bytes: 1 << 20},
		},
		"NoHeaders": {
			reason: "A server that never sends headers is given up on after headerTimeoutSeconds.",
			path:   "/no-headers",
			want: want{
				limit: &LimitError{URL: srv.URL + "/no-headers", Config: testConfig, Limit: LimitHeaders, Timeout: time.Second},
				msg:   "cannot download the image from " + srv.URL + "/no-headers: no response headers within 1 s (imageSources.headerTimeoutSeconds of " + testConfig + "); nothing was published",
			},
		},
		"Stall": {
			reason: "A server that sends headers and some bytes, then nothing, is given up on after stallTimeoutSeconds.",
			path:   "/stall",
			want: want{
				limit: &LimitError{URL: srv.URL + "/stall", Config: testConfig, Limit: LimitStall, Timeout: time.Second},
				msg:   "cannot download the image from " + srv.URL + "/stall: download stalled: no data for 1 s (imageSources.stallTimeoutSeconds of " + testConfig + "); nothing was published",
			},
		},
		"SlowIsNotStalled": {
			reason: "A slow server that keeps sending is not stalled, however long it takes.",
			path:   "/slow",
			want:   want{bytes: 5},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := New(downloadsFor(t, allowServers(t, srv), func(d *Downloads) {
				d.Limits.MaxBytes, d.Limits.HeaderTimeout, d.Limits.StallTimeout = 1<<20, time.Second, time.Second
			}))
			start := time.Now()
			n, err := fetch(c, srv.URL+tc.path)
			var got *LimitError
			if err != nil && !errorsAs(err, &got) {
				t.Fatalf("%s\nfetch() error = %v, want a *LimitError or none", tc.reason, err)
			}
			if diff := cmp.Diff(tc.want.limit, got); diff != "" {
				t.Errorf("%s\nfetch() limit: -want, +got:\n%s", tc.reason, diff)
			}
			if got != nil {
				if diff := cmp.Diff(tc.want.msg, err.Error()); diff != "" {
					t.Errorf("%s\nmessage: -want, +got:\n%s", tc.reason, diff)
				}
				if IsTerminal(err) != (got.Limit == LimitSize) {
					t.Errorf("%s\nIsTerminal(%v) = %v", tc.reason, err, IsTerminal(err))
				}
			} else if n != tc.want.bytes {
				t.Errorf("%s\nfetch() = %d bytes, want %d", tc.reason, n, tc.want.bytes)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("%s\nfetch() took %v", tc.reason, d)
			}
		})
	}
}

func TestLimitsDefaults(t *testing.T) {
	c := New(Downloads{})
	tr := c.http.Transport.(*guard).rt.(*http.Transport) // ours
	got := fmt.Sprintf("max %d header %v stall %v; transport proxy %v, keep-alives off %v, header timeout %v, compression off %v; resolver %T",
		c.dl.Limits.MaxBytes, c.dl.Limits.HeaderTimeout, c.dl.Limits.StallTimeout, tr.Proxy != nil, tr.DisableKeepAlives, tr.ResponseHeaderTimeout, tr.DisableCompression, c.dl.Resolver)
	want := "max 21474836480 header 30s stall 1m0s; transport proxy false, keep-alives off true, header timeout 30s, compression off true; resolver *net.Resolver"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("New(nil, Downloads{}): -want, +got:\n%s", diff)
	}
}

func TestDialControl(t *testing.T) {
	g := &guard{d: downloadsFor(t, allowServers(t, newCountingServer(t, nil).Server))}
	u := mustParse(t, "http://mirror.test/img")
	cases := map[string]struct {
		reason string
		addr   string
		want   string // the refusal's rule; "" for none
	}{
		"Loopback":   {reason: "The address about to be connected is checked: loopback is refused.", addr: "127.0.0.1:80", want: "built-in: loopback 127.0.0.0/8"},
		"Mapped":     {reason: "An IPv4-mapped address is checked as IPv4.", addr: "[::ffff:169.254.169.254]:80", want: "built-in: link-local 169.254.0.0/16 (the cloud metadata address)"},
		"NotIP":      {reason: "Anything but an IP address and port is refused.", addr: "mirror.test:80", want: "the address dialed is not an IP address and port"},
		"NotAllowed": {reason: "With allow rules, an address none matches is refused.", addr: "192.0.2.1:80", want: "not matched by any allow rule"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := g.control(u)("tcp", tc.addr, nil)
			got := ""
			var re *RefusedError
			if errorsAs(err, &re) {
				got = re.Rule
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s\ncontrol(%s): -want rule, +got:\n%s", tc.reason, tc.addr, diff)
			}
		})
	}
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
