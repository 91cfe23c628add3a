package kvmdomain

import (
	"bytes"
	"context"
	"path"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"
	"github.com/crossplane/crossplane-runtime/v2/pkg/event"
	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
	"github.com/provider-kvm/provider-kvm/internal/consoletail"
	"github.com/provider-kvm/provider-kvm/internal/domainxml"
	"github.com/provider-kvm/provider-kvm/internal/libvirt"
)

const (
	// ConsoleTailAfter is how long a running guest is not Ready before the end of its serial
	// console is shown, as a GuestNotReady event on its KVMDomain.
	ConsoleTailAfter = 5 * time.Minute
	// consoleTailEvery bounds those events: one per domain per this, while it stays not Ready.
	consoleTailEvery = 10 * time.Minute

	reasonConsoleTail event.Reason = "GuestNotReady"

	// consoleLogSuffix ends the name of a console log kept in the domain's pool.
	consoleLogSuffix = ".console.log"
	// hostLogDir is where a console is logged when not in the pool: libvirt's own log
	// directory, which nothing reads through libvirt.
	hostLogDir = "/var/log/libvirt/qemu/"
)

// consoleLogFor is the file a new domain's serial console is logged to: in its pool (a
// directory pool) when inPool, so that the provider can read its end through libvirt as a
// volume; else in libvirt's log directory.
func consoleLogFor(inPool bool, p libvirt.Pool, domain string) string {
	if inPool && p.Path != "" && (p.Type == "dir" || p.Type == "fs" || p.Type == "netfs") {
		return path.Join(p.Path, domain+consoleLogSuffix)
	}
	return hostLogDir + domain + "-console.log"
}

// consoleVolume is the volume of pool p that console log file is, when it is one of ours: a
// file directly in the pool's directory named <domain>.console.log.
func consoleVolume(p libvirt.Pool, log, domain string) (string, bool) {
	if p.Path == "" || log == "" {
		return "", false
	}
	dir, file := path.Split(log)
	if path.Clean(dir) != path.Clean(p.Path) || file != domain+consoleLogSuffix {
		return "", false
	}
	return file, true
}

// consoleTails remembers, per KVMDomain, when the end of its console was last shown.
type consoleTails struct {
	mu sync.Mutex
	m  map[types.UID]time.Time
}

func newConsoleTails() *consoleTails { return &consoleTails{m: map[types.UID]time.Time{}} }

// due is true, and remembers now, when uid's tail was not shown in the last consoleTailEvery.
func (c *consoleTails) due(uid types.UID, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if last, ok := c.m[uid]; ok && now.Sub(last) < consoleTailEvery {
		return false
	}
	c.m[uid] = now
	return true
}

func (c *consoleTails) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, uid)
}

// notReadyFor is how long cr's running guest has been not Ready (0 when it is Ready).
func notReadyFor(cr *v1alpha1.KVMDomain, now time.Time) time.Duration {
	c := cr.GetCondition(xpv2.TypeReady)
	if c.Status != corev1.ConditionFalse || c.Reason != xpv2.ReasonUnavailable || c.LastTransitionTime.IsZero() {
		return 0
	}
	return now.Sub(c.LastTransitionTime.Time)
}

// showConsoleTail shows, as a warning event, the end of the serial console of a running guest
// that has not been Ready for ConsoleTailAfter, at most once per consoleTailEvery. It reads
// only consoles logged in the domain's pool (consoleLogFor), one refresh of the pool and one
// download of the log's last consoletail.ReadBytes; what it shows is consoletail.Tail's, with
// every value the domain's SeedVolume carries (its user-data, network config and vendor
// data, inline or from Secrets) withheld. It is diagnostics: a failed read shows nothing.
func (e *external) showConsoleTail(ctx context.Context, cr *v1alpha1.KVMDomain, t target, d libvirt.DomainInfo) {
	now := time.Now()
	waited := notReadyFor(cr, now)
	if e.tails == nil || waited < ConsoleTailAfter {
		return
	}
	log, err := domainxml.ConsoleLogOf(d.XML)
	if err != nil || log == "" {
		return
	}
	p, err := e.lv.Pool(ctx, t.pool)
	if err != nil {
		return
	}
	vol, ok := consoleVolume(p, log, t.domain)
	if !ok || !e.tails.due(cr.GetUID(), now) {
		return
	}
	tail, err := e.readConsoleTail(ctx, cr, t.pool, vol)
	if err != nil || tail == "" {
		return
	}
	e.recorder.Event(cr, event.Warning(reasonConsoleTail, errors.Errorf(
		"not Ready for %s; the end of the guest's serial console (lines that may carry a secret withheld):\n%s",
		waited.Round(time.Minute), tail)))
}

// readConsoleTail reads the end of console log volume vol of pool and makes it fit to show.
func (e *external) readConsoleTail(ctx context.Context, cr *v1alpha1.KVMDomain, pool, vol string) (string, error) {
	// libvirt learns of a file in a dir pool only on a refresh.
	if err := e.lv.RefreshPool(ctx, pool); err != nil {
		return "", err
	}
	v, err := e.lv.Volume(ctx, pool, vol)
	if err != nil {
		return "", err
	}
	size := v.CapacityBytes
	length := uint64(consoletail.ReadBytes)
	offset := uint64(0)
	if size > length {
		offset = size - length
	}
	var buf bytes.Buffer
	if err := e.lv.Download(ctx, pool, vol, &buf, offset, length); err != nil {
		return "", err
	}
	secrets, err := e.seedValues(ctx, cr)
	if err != nil {
		return "", err // never show a tail whose secrets could not be read
	}
	return consoletail.Tail(buf.Bytes(), consoletail.MaxBytes, secrets...), nil
}

// seedValues are the values cr's SeedVolume carries into the guest: inline or from Secrets of
// the namespace. A console may echo any of them (cloud-init prints user-data it cannot parse).
func (e *external) seedValues(ctx context.Context, cr *v1alpha1.KVMDomain) ([][]byte, error) {
	p := cr.Spec.ForProvider
	if p.SeedVolumeName == nil || *p.SeedVolumeName == "" {
		return nil, nil
	}
	seed := &v1alpha1.SeedVolume{}
	if err := e.kube.Get(ctx, types.NamespacedName{Namespace: cr.GetNamespace(), Name: *p.SeedVolumeName}, seed); err != nil {
		return nil, errors.Wrapf(err, errGetSeed, *p.SeedVolumeName)
	}
	sp := seed.Spec.ForProvider
	var out [][]byte
	for _, s := range []*string{sp.UserData, sp.NetworkConfig, sp.VendorData} {
		if s != nil {
			out = append(out, []byte(*s))
		}
	}
	for _, ref := range []*v1alpha1.LocalSecretKeySelector{sp.UserDataSecretRef, sp.NetworkConfigSecretRef, sp.VendorDataSecretRef} {
		if ref == nil {
			continue
		}
		s := &corev1.Secret{}
		if err := e.kube.Get(ctx, types.NamespacedName{Namespace: cr.GetNamespace(), Name: ref.Name}, s); err != nil {
			return nil, errors.Wrapf(err, "cannot read Secret %s", ref.Name)
		}
		for _, v := range s.Data {
			out = append(out, v)
		}
	}
	return out, nil
}

// deleteConsoleLog removes a console log the domain kept in its pool (and the copies virtlogd
// rotated next to it), once the domain is undefined. The path comes from the definition of a
// domain that carried this resource's mark, and names this resource's derived domain, so the
// files are this resource's. Best effort: a log left behind is a small file.
func (e *external) deleteConsoleLog(ctx context.Context, t target, log string) {
	p, err := e.lv.Pool(ctx, t.pool)
	if err != nil {
		return
	}
	vol, ok := consoleVolume(p, log, t.domain)
	if !ok || e.lv.RefreshPool(ctx, t.pool) != nil {
		return
	}
	names, err := e.lv.VolumeNames(ctx, t.pool)
	if err != nil {
		return
	}
	for _, n := range names {
		if n == vol || (strings.HasPrefix(n, vol+".") && strings.Trim(n[len(vol)+1:], "0123456789") == "") {
			_ = e.lv.DeleteVolume(ctx, t.pool, n)
		}
	}
}
