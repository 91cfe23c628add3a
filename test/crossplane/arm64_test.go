package crossplane

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestArm64BinariesRun builds the provider and the function for linux/arm64 as
// cluster/xpkg/build.sh does (static, -trimpath, so the compiled packages are shared with make
// xpkg's) and runs each under user-mode emulation (qemu-aarch64-static, from the Debian install
// step): each starts and prints its usage, and the provider refuses an invalid --cluster-id
// with its own message, so its code past flag parsing runs too. No arm64 machine is at hand:
// this shows the images' binaries run on the platform they are built for, not that a whole
// arm64 node runs the packages.
func TestArm64BinariesRun(t *testing.T) {
	qemu, err := exec.LookPath("qemu-aarch64-static")
	if err != nil {
		msg := "qemu-aarch64-static not found (cluster/packages/install.sh installs qemu-user-static)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip("SKIPPING: " + msg)
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false"}
	cases := []struct {
		cmd     string
		args    []string
		exit    int
		printed string
	}{
		{cmd: "provider", args: []string{"--help"}, printed: "--cluster-id"},
		{cmd: "provider", args: []string{"--cluster-id=Not_A_Label"}, exit: 1, printed: "Invalid --cluster-id"},
		{cmd: "function", args: []string{"--help"}, printed: "--tls-server-certs-dir"},
	}
	built := map[string]string{}
	for _, tc := range cases {
		bin, ok := built[tc.cmd]
		if !ok {
			bin = filepath.Join(dir, tc.cmd)
			runFor(t, 15*time.Minute, root, env, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/"+tc.cmd)
			if fi, err := os.Stat(bin); err != nil || fi.Size() == 0 {
				t.Fatalf("go build ./cmd/%s for linux/arm64 made no binary: %v", tc.cmd, err)
			}
			built[tc.cmd] = bin
		}
		r := run(t, dir, nil, qemu, append([]string{bin}, tc.args...)...)
		code := 0
		var exit *exec.ExitError
		if errors.As(r.err, &exit) {
			code = exit.ExitCode()
		}
		if code != tc.exit || !strings.Contains(r.stdout+r.stderr, tc.printed) {
			t.Errorf("%s (linux/arm64) %s under %s: exit %d, want %d, printing %q:\n%s%s",
				tc.cmd, strings.Join(tc.args, " "), filepath.Base(qemu), code, tc.exit, tc.printed, r.stdout, r.stderr)
		}
	}
}
