package faults

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/faultpoint"
	"github.com/provider-kvm/provider-kvm/test/support/controlplane"
	"github.com/provider-kvm/provider-kvm/test/support/providerproc"
)

// pollInterval is the provider's --poll in the suite: a Ready resource is looked at this often.
const pollInterval = 10 * time.Second

// buildProvider builds cmd/provider with the build tag faults into dir.
func buildProvider(t *testing.T, dir string) string {
	return providerproc.Build(t, controlplane.RepoRoot(), dir, "faults")
}

// provider is one running provider process.
type provider struct{ *providerproc.Process }

// startProvider runs the provider with its log in logDir/name.log; killAt, if set, is its
// PKVM_FAULT_KILL_AT. It is stopped when the test ends.
func (s *suite) startProvider(t *testing.T, name, killAt string, args ...string) *provider {
	t.Helper()
	args = append([]string{"--no-leader-election", "--debug", "--metrics-bind-address=0", "--poll=" + pollInterval.String(), "--cluster-id=" + s.env.ClusterID}, args...)
	p := providerproc.Start(t, s.bin, s.kubeconfig, filepath.Join(s.logDir, name+".log"), []string{faultpoint.EnvKillAt + "=" + killAt}, args...)
	return &provider{p}
}

// waitKilled waits for the process to die at its fault point.
func (p *provider) waitKilled(timeout time.Duration, point string) error {
	select {
	case <-p.Done:
	case <-time.After(timeout):
		return fmt.Errorf("the provider did not reach fault point %s within %s (log %s)", point, timeout, p.Log)
	}
	var ee *exec.ExitError
	if !errors.As(p.Err, &ee) {
		return fmt.Errorf("the provider ended with %v, not killed at %s (log %s)", p.Err, point, p.Log)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return fmt.Errorf("the provider ended with %v, not SIGKILLed at %s (log %s)", p.Err, point, p.Log)
	}
	b, err := os.ReadFile(p.Log)
	if err != nil || !strings.Contains(string(b), "faultpoint: killed at "+point) {
		return fmt.Errorf("the provider was SIGKILLed, but not by fault point %s (log %s)", point, p.Log)
	}
	return nil
}
