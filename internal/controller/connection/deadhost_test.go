package connection

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crossplane/crossplane-runtime/v2/pkg/resource"
	"github.com/crossplane/crossplane-runtime/v2/pkg/test"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/host"
	"github.com/provider-kvm/provider-kvm/test/support/deadhost"
)

// TestConnectDeadHostShownAtOnce checks what resources on a dead host see: ten that connect
// together share one attempt (each waits at most the dial timeout), and every resource that
// connects afterwards fails at once with an error that names the config and the host, says
// that it is unreachable and why, and when it is tried again: the message of its Synced=False
// condition.
func TestConnectDeadHostShownAtOnce(t *testing.T) {
	cases := map[string]string{ // how the host hangs: the last error shown
		deadhost.HangAccepted: "the last one with: no answer within the dial timeout (500ms): cannot establish SSH session: context deadline exceeded",
		deadhost.HangSYN:      "the last one with: no answer within the dial timeout (500ms): cannot dial SSH server: dial tcp ",
	}
	for how, last := range cases {
		t.Run(how, func(t *testing.T) {
			h := deadhost.New(t, how)
			_, k, _ := ed25519.GenerateKey(rand.Reader)
			b, err := ssh.MarshalPrivateKey(k, "")
			if err != nil {
				t.Fatal(err)
			}
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "crossplane-system", Name: "ssh"}, Data: map[string][]byte{"key": pem.EncodeToMemory(b)}}
			cpc := &v1alpha1.ClusterProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "host"}, Spec: v1alpha1.ProviderConfigSpec{
				Transport: v1alpha1.TransportSSH, Host: h.Host, Port: int32(h.Port), User: "root",
				Credentials:                     &v1alpha1.SSHCredentials{SecretRef: v1alpha1.SecretKeySelector{Namespace: "crossplane-system", Name: "ssh", Key: "key"}},
				InsecureSkipHostKeyVerification: true,
			}}
			const dial = 500 * time.Millisecond
			conns := host.NewConnections(host.WithDialTimeout(dial))
			defer conns.Close()
			c := &Connector{Kube: &test.MockClient{MockGet: store(cpc, sec)}, Conns: conns,
				Usage: resource.ModernTrackerFn(func(context.Context, resource.ModernManaged) error { return nil })}

			var wg sync.WaitGroup
			took := make([]time.Duration, 10)
			for i := range took {
				wg.Go(func() {
					start := time.Now()
					if _, err := c.Connect(context.Background(), managed()); err == nil {
						t.Error("Connect() to a dead host: want an error")
					}
					took[i] = time.Since(start)
				})
			}
			wg.Wait()
			for i, d := range took {
				if d > dial+300*time.Millisecond {
					t.Errorf("resource %d of the first ten waited %v, want at most the dial timeout %v", i, d, dial)
				}
			}
			start := time.Now()
			_, err = c.Connect(context.Background(), managed())
			d := time.Since(start)
			if d > 50*time.Millisecond {
				t.Errorf("Connect() once the host is known down took %v, want at once", d)
			}
			addr := "root@" + h.Host + ":"
			for _, want := range []string{
				"cannot connect to the libvirt host of ClusterProviderConfig/host: libvirt host " + addr,
				"is unreachable: 1 connection attempt failed since ",
				last,
				"; the next attempt starts at ",
			} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("Connect() error %q does not say %q", err, want)
				}
			}
			if err != nil && strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Errorf("the error leaks the key: %v", err)
			}
			t.Logf("Synced=False message: %v", err)
		})
	}
}
