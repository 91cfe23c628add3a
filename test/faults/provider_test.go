package faults

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/provider-kvm/provider-kvm/internal/faultpoint"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
)

// pollInterval is the provider's --poll in the suite: a Ready resource is looked at this often.
const pollInterval = 10 * time.Second

// buildProvider builds cmd/provider with the build tag faults into dir.
func buildProvider(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "provider")
	cmd := exec.Command("go", "build", "-tags", "faults", "-o", bin, "./cmd/provider")
	cmd.Dir = controlplane.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the provider with -tags faults: %v\n%s", err, out)
	}
	return bin
}

// writeKubeconfig writes a kubeconfig for cfg (envtest's admin client certificate).
func writeKubeconfig(t *testing.T, cfg *rest.Config, path string) {
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

// provider is one running provider process.
type provider struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // what Wait returned, set before done closes
}

// startProvider runs the provider with its log in logDir/name.log; killAt, if set, is its
// PKVM_FAULT_KILL_AT. It is stopped when the test ends.
func (s *suite) startProvider(t *testing.T, name, killAt string, args ...string) *provider {
	t.Helper()
	log := filepath.Join(s.logDir, name+".log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--no-leader-election", "--debug", "--metrics-bind-address=0", "--poll=" + pollInterval.String(), "--cluster-id=" + s.env.ClusterID}, args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig, faultpoint.EnvKillAt+"="+killAt)
	cmd.Stdout, cmd.Stderr = f, f
	// A provider never outlives the test process (nor keeps the test bed's lock it inherited).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatalf("starting the provider: %v", err)
	}
	p := &provider{cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	t.Cleanup(p.stop)
	return p
}

// waitKilled waits for the process to die at its fault point.
func (p *provider) waitKilled(timeout time.Duration, point string) error {
	select {
	case <-p.done:
	case <-time.After(timeout):
		return fmt.Errorf("the provider did not reach fault point %s within %s (log %s)", point, timeout, p.log)
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) {
		return fmt.Errorf("the provider ended with %v, not killed at %s (log %s)", p.err, point, p.log)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return fmt.Errorf("the provider ended with %v, not SIGKILLed at %s (log %s)", p.err, point, p.log)
	}
	b, err := os.ReadFile(p.log)
	if err != nil || !strings.Contains(string(b), "faultpoint: killed at "+point) {
		return fmt.Errorf("the provider was SIGKILLed, but not by fault point %s (log %s)", point, p.log)
	}
	return nil
}

var stopMu sync.Mutex

// stop ends the process gracefully (SIGTERM, then SIGKILL after 20 s); a no-op once it ended.
func (p *provider) stop() {
	stopMu.Lock()
	defer stopMu.Unlock()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
