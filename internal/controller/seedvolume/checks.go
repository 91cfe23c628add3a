package seedvolume

import (
	"sync"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

// DefaultRecheck is how long a seed read back and hashed is trusted on its fingerprint
// (capacity and allocation) alone: at most the provider's sync period (1 h by default). A
// truncated or refilled seed changes its fingerprint and is read at the next poll; one
// altered in place without a change of size is read at the latest after this period.
const DefaultRecheck = time.Hour

// checks remembers the digest of each seed read back, with its volume's fingerprint.
type checks struct {
	now     func() time.Time
	recheck time.Duration
	mu      sync.Mutex
	m       map[string]check
}

type check struct {
	fp     libvirt.VolumeInfo
	sha256 string
	path   string
	at     time.Time
}

func newChecks() *checks {
	return &checks{now: time.Now, recheck: DefaultRecheck, m: map[string]check{}}
}

// get returns the digest and path of the seed k read back with fingerprint fp within the
// recheck period, or "" when it must be read.
func (c *checks) get(k string, fp libvirt.VolumeInfo) (sha, path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.m[k]
	if !ok || ch.fp != fp || c.now().Sub(ch.at) >= c.recheck {
		delete(c.m, k)
		return "", ""
	}
	return ch.sha256, ch.path
}

func (c *checks) put(k string, fp libvirt.VolumeInfo, sha, path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[k] = check{fp: fp, sha256: sha, path: path, at: c.now()}
}

func (c *checks) forget(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, k)
}
