// Package providerproc builds cmd/provider and runs it as a real process against a test
// control plane, as a cluster runs it: the fault suite kills it at fault points, the scale
// bench measures its memory and CPU from /proc and its metrics endpoint.
package providerproc

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Build builds cmd/provider of the repository at root into dir, with the build tags given.
func Build(t testing.TB, root, dir string, tags ...string) string {
	t.Helper()
	bin := filepath.Join(dir, "provider")
	args := []string{"build", "-o", bin}
	for _, tag := range tags {
		args = append(args, "-tags", tag)
	}
	cmd := exec.CommandContext(context.Background(), "go", append(args, "./cmd/provider")...) //nolint:gosec // the test's own build tags
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the provider (tags %v): %v\n%s", tags, err, out)
	}
	return bin
}

// WriteKubeconfig writes a kubeconfig for cfg (envtest's admin client certificate) to path.
func WriteKubeconfig(t testing.TB, cfg *rest.Config, path string) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("writing the provider's kubeconfig: %v", err)
	}
}

// Process is one running provider.
type Process struct {
	Cmd  *exec.Cmd
	Log  string // its stdout and stderr
	Done chan struct{}
	Err  error // what Wait returned, set before Done closes

	stopMu sync.Mutex
}

// Start runs bin with args, KUBECONFIG=kubeconfig and the extra environment env, its output
// in log. It never outlives the test process, and is stopped when the test ends.
func Start(t testing.TB, bin, kubeconfig, log string, env []string, args ...string) *Process {
	t.Helper()
	f, err := os.Create(log) //nolint:gosec // a path the test chose
	if err != nil {
		t.Fatal(err)
	}
	// Not the test's context: Stop ends the process gracefully, SIGTERM first.
	cmd := exec.CommandContext(context.Background(), bin, args...) //nolint:gosec // the binary Build made, with the test's flags
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+kubeconfig), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Killed with the test process (and so never keeps a lock the test inherited).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatalf("starting the provider: %v", err)
	}
	p := &Process{Cmd: cmd, Log: log, Done: make(chan struct{})}
	go func() {
		p.Err = cmd.Wait()
		_ = f.Close()
		close(p.Done)
	}()
	t.Cleanup(p.Stop)
	return p
}

// Stop ends the process gracefully (SIGTERM, then SIGKILL after 20 s); a no-op once it ended.
func (p *Process) Stop() {
	p.stopMu.Lock()
	defer p.stopMu.Unlock()
	select {
	case <-p.Done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done:
	case <-time.After(20 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.Done
	}
}

// Alive returns an error when the process has ended.
func (p *Process) Alive() error {
	select {
	case <-p.Done:
		return errors.New("the provider process ended: " + errString(p.Err) + " (log " + p.Log + ")")
	default:
		return nil
	}
}

func errString(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}
