//go:build bench

package stockimage

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/provider-kvm/provider-kvm/internal/function"
	"github.com/provider-kvm/provider-kvm/test/support/testbed"
)

// presentReport: cloud-init's per-module timings once it is done (squid answers before the
// final stage ends: runcmd restarts it, then enables it), and proof that the check found
// nothing to install (no packages file, apt's configuration untouched).
const presentReport = `cloud-init status --wait --long | sed 's/^/status /'
cloud-init analyze blame -i /var/log/cloud-init.log | sed 's/^/blame /'
ls ` + function.PackagesConfig + ` ` + function.AptSourcesConf + ` 2>&1 | sed 's/^/ls /'
grep -c 'apt-get' /var/log/cloud-init.log | sed 's/^/apt-get-calls /'
`

// TestPresentPackagesBootCost boots the test image (squid and the guest agent installed) with a
// Proxy's user-data and says what the package check costs the boot, measured inside the guest
// (cloud-init's own timing of its bootcmd module; boot wall time under TCG varies by tens of
// seconds), then boots it with boot-check.sh's own seed, which has no bootcmd, for comparison.
// With -tags bench: make bench-boot-packages.
func TestPresentPackagesBootCost(t *testing.T) {
	e := testbed.Require(t)
	image := os.Getenv("TESTBED_IMAGE")
	if image == "" {
		image = os.Getenv("HOME") + "/.cache/provider-kvm/images/debian-12-testbed.qcow2"
	}
	if _, err := os.Stat(image); err != nil {
		notRun(t, "no guest image at "+image+" (make image)")
	}
	net := e.Net
	if net == "" {
		net = "default"
	}
	bridge := bridgeIP(t, net)
	ud := filepath.Join(t.TempDir(), "user-data")
	// The platform's sources are set, as a platform with stock images would: with both
	// packages present they must not be written.
	if err := os.WriteFile(ud, []byte(proxyUserData(t, bridge, "deb [trusted=yes] http://"+bridge+":9/ ./")), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out := bootCheck(t, "IMAGE="+image, "USER_DATA="+ud, "VENDOR_DATA=none", "TIMEOUT=900",
		"PORT="+strconv.Itoa(freePort(t, bridge)), "GUEST_EXEC="+presentReport)
	for _, want := range []string{
		"guest| status status: done",
		"guest| ls ls: cannot access '" + function.PackagesConfig + "'",
		"guest| ls ls: cannot access '" + function.AptSourcesConf + "'",
		"guest| apt-get-calls 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the guest's report lacks %q", want)
		}
	}
	bc, pk := blame(out, "config-bootcmd"), blame(out, "config-package-update-upgrade-install")
	if bc < 0 {
		t.Errorf("cloud-init analyze blame lists no config-bootcmd")
	}
	t.Logf("TIMING packages present, the Proxy's user-data: bootcmd %.3fs, package module %.3fs, runcmd (scripts-user) %.3fs (cloud-init analyze blame), start->204 %.1fs, test %.0fs",
		bc, pk, blame(out, "config-scripts-user"), seconds(out, "start->204"), time.Since(start).Seconds())

	// The baseline: boot-check.sh's own seed (no bootcmd), the same image and size.
	start = time.Now()
	base := bootCheck(t, "IMAGE="+image, "TIMEOUT=900", "PORT="+strconv.Itoa(freePort(t, bridge)), "GUEST_EXEC="+presentReport)
	t.Logf("TIMING packages present, boot-check's seed (no bootcmd): bootcmd %.3fs, package module %.3fs, runcmd (scripts-user) %.3fs, vendor-data %.3fs (cloud-init analyze blame), start->204 %.1fs, test %.0fs",
		blame(base, "config-bootcmd"), blame(base, "config-package-update-upgrade-install"), blame(base, "config-scripts-user"),
		blame(base, "config-scripts-vendor"), seconds(base, "start->204"), time.Since(start).Seconds())
}
