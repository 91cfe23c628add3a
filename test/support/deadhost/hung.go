// Package hung starts TCP listeners on loopback that stand in for dead or blackholed hosts:
// one that accepts connections and never answers, one that never accepts (its SYNs are
// dropped). Tests of the provider's behaviour on such hosts use them, and a fault suite can.
package deadhost

import (
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Host is a TCP listener on loopback standing in for a dead or blackholed libvirt host.
// New(t, HangAccepted) is a host whose sshd accepts and never answers; New(t, HangSYN) one
// whose SYNs are dropped, like a blackholed address (the listener's accept queue is full and
// it never accepts).
type Host struct {
	Host string
	Port int
	// Accepted counts TCP connections accepted (HangAccepted only): one per dial attempt.
	Accepted atomic.Int32
}

// How a Host hangs.
const (
	HangAccepted = "accepts and never answers"
	HangSYN      = "never accepts"
)

// New starts a Host on 127.0.0.1; it stops with the test.
func New(t testing.TB, how string) *Host {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().(*net.TCPAddr)
	h := &Host{Host: a.IP.String(), Port: a.Port}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	if how == HangSYN {
		// Shrink the backlog to its minimum and fill the accept queue: Linux then drops
		// further SYNs, and a dial hangs until its timeout.
		rc, err := ln.(*net.TCPListener).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Control(func(fd uintptr) { err = syscall.Listen(int(fd), 0) }); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			d := net.Dialer{Timeout: 200 * time.Millisecond}
			c, err := d.Dial("tcp", ln.Addr().String())
			if err != nil {
				break // the queue is full
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return h
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.Accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return h
}
