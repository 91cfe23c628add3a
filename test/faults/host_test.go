package faults

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/imagecache"
	"github.com/provider-kvm/provider-kvm/test/support/hostinspect"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// virsh runs virsh against the test bed's libvirtd (the test runs inside its namespace).
func virsh(args ...string) (string, error) {
	out, err := exec.Command("virsh", append([]string{"-q", "-c", "qemu:///system"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("virsh %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// owned tells whether a host object's name belongs to a case: its namespaces' objects
// ("<namespace>_..."), or the cached image of one of its digests and its records.
type owned struct {
	namespaces []string
	digests    []string
}

func (o owned) match(name string) bool {
	for _, ns := range o.namespaces {
		if strings.HasPrefix(name, ns+"_") {
			return true
		}
	}
	for _, d := range o.digests {
		if strings.Contains(name, d) {
			return true
		}
	}
	return false
}

// inspect is the test bed's libvirtd as test/support/hostinspect sees it, with the pool's
// directory, so a file libvirt does not list counts too.
func inspect(tb *testbed.Env) *hostinspect.Host {
	return &hostinspect.Host{Name: "testbed", Socket: tb.LibvirtSocket, URI: "qemu:///system", Pool: tb.Pool, PoolDir: tb.PoolDir}
}

// leftovers lists what of o is on the host: domains (defined, running or not), volumes and
// files of the pool (data volumes, markers, claims, owner and ownership records, overlays,
// seeds) and NVRAM files, as "kind name".
func leftovers(t *testing.T, h *hostinspect.Host, o owned) []string {
	t.Helper()
	objs, err := h.Matching(o.match, nil)
	if err != nil {
		t.Errorf("listing the host: %v", err)
	}
	out := make([]string, 0, len(objs))
	for _, obj := range objs {
		out = append(out, obj.Kind+" "+filepath.Base(obj.Name))
	}
	sort.Strings(out)
	return out
}

// qcow2Backing returns the backing file a qcow2 file names ("" for none).
func qcow2Backing(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := make([]byte, 20)
	if _, err := io.ReadFull(f, h); err != nil {
		return "", fmt.Errorf("reading the qcow2 header of %s: %w", path, err)
	}
	if !bytes.Equal(h[:4], []byte("QFI\xfb")) {
		return "", fmt.Errorf("%s is not qcow2", path)
	}
	off, n := binary.BigEndian.Uint64(h[8:16]), binary.BigEndian.Uint32(h[16:20])
	if off == 0 || n == 0 {
		return "", nil
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, int64(off)); err != nil {
		return "", fmt.Errorf("reading the backing file name of %s: %w", path, err)
	}
	return string(b), nil
}

// checkBase returns why the base volume at path is not a complete, verified, published
// image, or nil: its marker must be a published record naming it, verified, with the file's
// size, and the file's sha256 must be the marker's.
func checkBase(path string, sums map[string]string) error {
	b, err := os.ReadFile(path + imagecache.MarkerSuffix)
	if err != nil {
		return fmt.Errorf("no marker: %w", err)
	}
	r, err := imagecache.DecodeRecord(bytes.TrimRight(b, "\x00"))
	if err != nil {
		return fmt.Errorf("marker unreadable: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("base file: %w", err)
	}
	switch {
	case r.State != imagecache.RecordPublished || r.Volume != filepath.Base(path):
		return fmt.Errorf("marker state %q for volume %q", r.State, r.Volume)
	case !r.Verified:
		return fmt.Errorf("marker not verified")
	case r.SizeBytes != fi.Size():
		return fmt.Errorf("file holds %d bytes, marker records %d", fi.Size(), r.SizeBytes)
	}
	key := fmt.Sprintf("%s %d %d", path, fi.Size(), fi.ModTime().UnixNano())
	sum, ok := sums[key]
	if !ok {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h := sha256.Sum256(data)
		sum = hex.EncodeToString(h[:])
		sums[key] = sum
	}
	if sum != r.SHA256 {
		return fmt.Errorf("file sha256 %s, marker records %s", sum, r.SHA256)
	}
	return nil
}

// monitor samples the domains of the suite every second, running or defined, and records every
// one whose root disk backs onto a base volume checkBase refuses: a guest started (or to be
// started) from an unverified or partial image.
type monitor struct {
	prefix  string
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	bad     []string
	samples int
}

func startMonitor(prefix string) *monitor {
	m := &monitor{prefix: prefix, stop: make(chan struct{}), done: make(chan struct{})}
	go m.run()
	return m
}

func (m *monitor) run() {
	defer close(m.done)
	sums := map[string]string{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		// Defined domains too: a shut-off domain's overlay must back onto a published base as
		// well (its guest would boot from it at its next start).
		out, err := virsh("list", "--all", "--name")
		if err != nil {
			continue // libvirtd restarting
		}
		for _, d := range lines(out) {
			if strings.HasPrefix(d, m.prefix) {
				m.check(d, sums)
			}
		}
	}
}

func (m *monitor) check(domain string, sums map[string]string) {
	out, err := virsh("domblklist", "--details", domain)
	if err != nil {
		return // gone meanwhile
	}
	m.mu.Lock()
	m.samples++
	m.mu.Unlock()
	for _, l := range lines(out) {
		f := strings.Fields(l) // type device target source
		if len(f) != 4 || f[0] != "file" || f[1] != "disk" {
			continue
		}
		backing, err := qcow2Backing(f[3])
		if err == nil && backing == "" {
			err = fmt.Errorf("root disk %s has no backing file", f[3])
		}
		if err == nil {
			err = checkBase(backing, sums)
		}
		if err != nil && !os.IsNotExist(err) {
			m.mu.Lock()
			m.bad = append(m.bad, fmt.Sprintf("%s %s defined on %s: %v", time.Now().Format(time.TimeOnly), domain, f[3], err))
			m.mu.Unlock()
		}
	}
}

// end stops the monitor and returns the violations seen and how many running domains it
// looked at.
func (m *monitor) end() ([]string, int) {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bad, m.samples
}

// cleanHost removes what an earlier, aborted run of the suite left on the host (objects of o):
// a domain of a namespace's name left over would not be ours to the new run's resources.
func cleanHost(t *testing.T, h *hostinspect.Host, o owned) {
	t.Helper()
	objs, err := h.Matching(o.match, nil)
	if err != nil {
		t.Fatalf("listing the host: %v", err)
	}
	if len(objs) == 0 {
		return
	}
	t.Logf("removing %d objects an earlier run of the suite left: %s", len(objs), hostinspect.List(objs))
	for _, err := range h.Remove(objs) {
		t.Logf("%v", err)
	}
	_, _ = virsh("pool-refresh", h.Pool)
	if left := leftovers(t, h, o); len(left) > 0 {
		t.Fatalf("cannot clean the host of an earlier run's objects: %s", strings.Join(left, ", "))
	}
}
