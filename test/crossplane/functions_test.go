package crossplane

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Names of the Functions as package/configuration's Compositions refer to them.
const (
	fnKVMProxy  = "provider-kvm-function-kvm-proxy"
	fnAutoReady = "crossplane-contrib-function-auto-ready"
)

// syncBuffer is a bytes.Buffer safe for a process's output and a test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// buildFunction builds cmd/function (function-kvm-proxy) into dir.
func buildFunction(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "function-kvm-proxy")
	abs, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, abs, nil, "go", "build", "-o", bin, "./cmd/function")
	return bin
}

// freeLoopbackPort asks the kernel for a free TCP port on 127.0.0.1. Another process may
// take it before the function binds it; startFunction then notices the exit and retries.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("cannot find a free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port // a TCP listener has a TCP address
}

// startFunction runs a function binary with --insecure on a free loopback port until the
// test ends and returns its gRPC target (127.0.0.1:port).
//
// Both functions use function-sdk-go's server. function-auto-ready also always starts the
// SDK's Prometheus listener on :8080 (there is no flag to turn it off); the SDK ignores a
// failure to bind it, so a second auto-ready, or anything else holding :8080, never fails
// a test. Our function starts no metrics listener unless --metrics-address is set.
func startFunction(t *testing.T, name, bin string) string {
	t.Helper()
	const attempts = 3
	for range attempts {
		addr := "127.0.0.1:" + strconv.Itoa(freeLoopbackPort(t))
		out := &syncBuffer{}
		cmd := exec.Command(bin, "--insecure", "--address", addr)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatalf("cannot start %s: %v", name, err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
			if t.Failed() {
				t.Logf("%s output:\n%s", name, out.String())
			}
		})
		if err := waitListening(addr, exited); err != nil {
			t.Logf("%s on %s: %v; output:\n%s", name, addr, err, out.String())
			continue
		}
		return addr
	}
	t.Fatalf("%s did not start in %d attempts", name, attempts)
	return ""
}

// waitListening waits until addr accepts connections, or the process exits.
func waitListening(addr string, exited <-chan error) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			_ = c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not listening after 20s")
}

// writeFunctions writes the functions file crossplane render reads: both Functions named as
// the Compositions refer to them, run as already-started processes ("Development").
func writeFunctions(t *testing.T, dir string, targets map[string]string) string {
	t.Helper()
	pkgs := map[string]string{
		fnKVMProxy:  "xpkg.crossplane.io/provider-kvm/function-kvm-proxy:v0.1.0",
		fnAutoReady: "xpkg.crossplane.io/crossplane-contrib/function-auto-ready:v0.7.0",
	}
	var b bytes.Buffer
	for _, name := range []string{fnKVMProxy, fnAutoReady} {
		fmt.Fprintf(&b, `---
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: %s
  annotations:
    render.crossplane.io/runtime: Development
    render.crossplane.io/runtime-development-target: %s
spec:
  package: %s
`, name, targets[name], pkgs[name])
	}
	f := filepath.Join(dir, "functions.yaml")
	if err := os.WriteFile(f, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
