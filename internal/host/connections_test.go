package host

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// silentServer accepts TCP connections on loopback and never answers, like
// a host whose sshd hangs.
func silentServer(t *testing.T) (string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	a := ln.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port
}

func testKey(t testing.TB) []byte {
	t.Helper()
	_, k, _ := ed25519.GenerateKey(rand.Reader)
	b, err := ssh.MarshalPrivateKey(k, "")
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(b)
}

// TestPoolHungHostDoesNotBlockOthers checks that a dial to a hung host is
// bounded by the caller's context, that other callers of the same host give
// up on their own context, and that callers of other hosts are not slowed.
func TestPoolHungHostDoesNotBlockOthers(t *testing.T) {
	h, port := silentServer(t)
	p := NewConnections(WithDialTimeout(5 * time.Second))
	defer p.Close()
	hung := Config{Host: h, Port: port, PrivateKey: testKey(t), InsecureSkipHostKeyVerification: true}

	var wg sync.WaitGroup
	errs := make([]error, 3)
	took := make([]time.Duration, 3)
	for i, d := range []time.Duration{800 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond} {
		wg.Go(func() {
			if i > 0 {
				time.Sleep(50 * time.Millisecond) // let the first caller hold the dial
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			start := time.Now()
			_, errs[i] = p.Get(ctx, hung)
			took[i] = time.Since(start)
		})
	}
	// Meanwhile another host answers (fails) at once.
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	_, err := p.Get(context.Background(), Config{Transport: TransportUnix, Socket: "/nonexistent/libvirt-sock"})
	if err == nil {
		t.Error("Get(unix nonexistent): want error")
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("Get of another host took %v while a dial hung; want no pool-wide lock", d)
	}
	wg.Wait()
	for i, err := range errs {
		if !errorsIs(err, context.DeadlineExceeded) {
			t.Errorf("caller %d: %v, want context.DeadlineExceeded", i, err)
		}
		if took[i] > 1500*time.Millisecond {
			t.Errorf("caller %d took %v; want bounded by its context", i, took[i])
		}
	}
	want := "cannot connect to libvirt host root@" + net.JoinHostPort(h, strconv.Itoa(port))
	if errs[0] == nil || len(errs[0].Error()) < len(want) || errs[0].Error()[:len(want)] != want {
		t.Errorf("error %q does not start with %q", errs[0], want)
	}
}

func TestPoolClosed(t *testing.T) {
	p := NewConnections()
	_ = p.Close()
	_, err := p.Get(context.Background(), Config{Transport: TransportUnix, Socket: "/nonexistent"})
	if err == nil {
		t.Fatal("Get on closed pool: want error")
	}
}
