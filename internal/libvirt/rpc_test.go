package libvirt

import (
	"context"
	"testing"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/libvirttest"
	"github.com/google/go-cmp/cmp"

	"github.com/provider-kvm/provider-kvm/internal/metrics"
)

// fakeConn is a Conn whose Do is a function.
type fakeConn struct {
	do      func(ctx context.Context, fn func(l *golibvirt.Libvirt) error) error
	address string
}

func (f fakeConn) Do(ctx context.Context, fn func(l *golibvirt.Libvirt) error) error {
	return f.do(ctx, fn)
}
func (f fakeConn) Address() string { return f.address }

// mockConn is a Conn over go-libvirt's in-memory mock of libvirtd.
func mockConn(t *testing.T) fakeConn {
	t.Helper()
	l := golibvirt.NewWithDialer(libvirttest.New())
	if err := l.ConnectToURI(golibvirt.QEMUSystem); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Disconnect() })
	return fakeConn{address: "u@h:22", do: func(_ context.Context, fn func(l *golibvirt.Libvirt) error) error { return fn(l) }}
}

// call is one counted RPC.
type call struct{ Kind, Op string }

// Every RPC a Client makes is counted once, for the kind of the call's context, else the
// Client's, else "other".
func TestCallsCounted(t *testing.T) {
	type args struct {
		clientKind, ctxKind string
		fn                  func(ctx context.Context, c *Client) error
	}
	domain := func(ctx context.Context, c *Client) error {
		return c.withDomain(ctx, "test", func(l rpc, d golibvirt.Domain) error {
			_, _, err := l.DomainGetState(d, 0)
			return err
		})
	}
	cases := map[string]struct {
		args args
		want []call
	}{
		"NoKind": {
			args: args{fn: domain},
			want: []call{{metrics.KindOther, "DomainLookupByName"}, {metrics.KindOther, "DomainGetState"}},
		},
		"ClientKind": {
			args: args{clientKind: "KVMDomain", fn: domain},
			want: []call{{"KVMDomain", "DomainLookupByName"}, {"KVMDomain", "DomainGetState"}},
		},
		"ContextKindWins": {
			args: args{clientKind: "KVMDomain", ctxKind: "SeedVolume", fn: func(ctx context.Context, c *Client) error {
				return c.do(ctx, func(l rpc) error {
					_, err := l.StoragePoolLookupByName("default")
					return err
				})
			}},
			want: []call{{"SeedVolume", "StoragePoolLookupByName"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []call
			c := New(mockConn(t), NewShared(), WithKind(tc.args.clientKind), withCounters(func(ctx context.Context, op string) {
				got = append(got, call{metrics.KindFrom(ctx), op})
			}, func(string) {}))
			if err := tc.args.fn(metrics.WithKind(context.Background(), tc.args.ctxKind), c); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("counted calls: -want +got:\n%s", diff)
			}
		})
	}
}
