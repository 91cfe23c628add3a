package testbed

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A SmallPool is a libvirt storage pool (dir) on a tmpfs of a few MiB that only the test bed's
// libvirtd sees: the tmpfs is mounted in libvirtd's own mount namespace, never on the
// machine's disk, so filling it fills nothing else. It is destroyed and unmounted at the end
// of the test.
type SmallPool struct {
	// Name of the libvirt pool; Dir its target path (in libvirtd's mount namespace).
	Name, Dir string
	pid       string
}

// SmallPool mounts a tmpfs of size bytes in libvirtd's mount namespace under Dir and starts a
// transient pool on it.
func (e *Env) SmallPool(t testing.TB, size int) *SmallPool {
	t.Helper()
	pid, err := os.ReadFile(filepath.Join(e.Dir, "run", "libvirtd.pid"))
	if err != nil || len(strings.Fields(string(pid))) == 0 {
		t.Fatalf("libvirtd's pid: %v", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "pkvm-test-full-" + hex.EncodeToString(b)
	p := &SmallPool{Name: name, Dir: filepath.Join(e.Dir, name), pid: strings.Fields(string(pid))[0]}
	p.InNS(t, fmt.Sprintf("mkdir -p %s && mount -t tmpfs -o size=%d,mode=0711 %s %s", p.Dir, size, name, p.Dir))
	t.Cleanup(func() {
		_, _ = exec.Command("virsh", "-q", "-c", "qemu:///system", "pool-destroy", name).CombinedOutput()
		_ = exec.Command("nsenter", "-t", p.pid, "-m", "--", "sh", "-c", "umount "+p.Dir+" && rmdir "+p.Dir).Run()
	})
	if out, err := exec.Command("virsh", "-q", "-c", "qemu:///system", "pool-create-as", name, "dir", "--target", p.Dir).CombinedOutput(); err != nil {
		t.Fatalf("virsh pool-create-as: %v\n%s", err, out)
	}
	return p
}

// InNS runs a shell script in libvirtd's mount namespace and returns its output.
func (p *SmallPool) InNS(t testing.TB, script string) string {
	t.Helper()
	out, err := exec.Command("nsenter", "-t", p.pid, "-m", "--", "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("in libvirtd's mount namespace: %s: %v\n%s", script, err, out)
	}
	return strings.TrimSpace(string(out))
}

// UsedKiB is what the tmpfs holds, in KiB.
func (p *SmallPool) UsedKiB(t testing.TB) string {
	t.Helper()
	return p.InNS(t, "df -k --output=used "+p.Dir+" | tail -n 1")
}
