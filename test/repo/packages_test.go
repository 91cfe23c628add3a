/*
Copyright 2026 The provider-kvm Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package repo

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// installStep is the one place allowed to run a package manager.
const installStep = "cluster/packages/install.sh"

// packageManager matches a command line that installs, removes or refreshes Debian packages.
var packageManager = regexp.MustCompile(`(^|[\s;&|(\x60"'])(sudo\s+)?(apt-get|aptitude|apt\s+(install|update|upgrade|full-upgrade|dist-upgrade|remove|purge|reinstall)|dpkg\s+(-i|--install|--unpack))\b`)

// shellComment strips a shell comment: a # at the start of a line or after whitespace.
var shellComment = regexp.MustCompile(`(^|\s)#.*$`)

// packageManagerCalls returns the lines of a script that run a package manager, comments aside.
func packageManagerCalls(script string) []string {
	var out []string
	s := bufio.NewScanner(strings.NewReader(script))
	for s.Scan() {
		line := shellComment.ReplaceAllString(s.Text(), "")
		if packageManager.MatchString(line) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

func TestPackageManagerCalls(t *testing.T) {
	cases := map[string]struct {
		script string
		want   []string
	}{
		"AptGetInstall":   {script: "apt-get install -y genisoimage", want: []string{"apt-get install -y genisoimage"}},
		"AfterAnd":        {script: "x && DEBIAN_FRONTEND=noninteractive apt-get -q update", want: []string{"x && DEBIAN_FRONTEND=noninteractive apt-get -q update"}},
		"Indented":        {script: "if x; then\n  apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null\nfi", want: []string{"apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null"}},
		"InNetns":         {script: `ip netns exec kvmhost apt install curl`, want: []string{"ip netns exec kvmhost apt install curl"}},
		"Sudo":            {script: "sudo apt update", want: []string{"sudo apt update"}},
		"DpkgInstall":     {script: "dpkg -i x.deb", want: []string{"dpkg -i x.deb"}},
		"BashC":           {script: `bash -c "apt-get install -y x"`, want: []string{`bash -c "apt-get install -y x"`}},
		"Comment":         {script: "# apt-get install x\nls # then apt-get update"},
		"AptPath":         {script: `rm -rf "$R"/var/lib/apt/lists/*`},
		"DpkgQuery":       {script: `dpkg-query -W -f='${Status}' make`},
		"WordContainsApt": {script: "adapt install; capture update"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, packageManagerCalls(tc.script)); diff != "" {
				t.Errorf("packageManagerCalls(): -want, +got:\n%s", diff)
			}
		})
	}
}

// execCalls keeps the lines that start a process.
func execCalls(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.Contains(l, "exec.Command") {
			out = append(out, l)
		}
	}
	return out
}

// repoRoot is the repository's top directory (this package is test/repo).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found at %s: %v", root, err)
	}
	return root
}

// scripts lists the files that run commands: shell scripts, Makefiles and executables with a
// shebang under cluster/, hack/ and .ci/, plus the top Makefile, and Go sources (exec calls).
func scripts(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	for _, dir := range []string{"cluster", "hack", ".ci", "internal", "cmd", "test"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			name := d.Name()
			if strings.HasSuffix(name, ".sh") || name == "Makefile" || strings.HasPrefix(string(b), "#!") ||
				strings.HasSuffix(name, ".go") {
				out = append(out, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return append(out, filepath.Join(root, "Makefile"))
}

// TestOnlyTheInstallStepRunsAPackageManager fails when any script but the install step runs
// apt-get, apt or dpkg -i: inside the test bed's network namespace there is no DNS, so such a
// call works only on machines that happen to have the package already.
func TestOnlyTheInstallStepRunsAPackageManager(t *testing.T) {
	root := repoRoot(t)
	files := scripts(t, root)
	if len(files) < 10 {
		t.Fatalf("found only %d scripts under %s; the walk is broken", len(files), root)
	}
	sawInstallStep := false
	for _, p := range files {
		rel, _ := filepath.Rel(root, p)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		calls := packageManagerCalls(string(b))
		if strings.HasSuffix(rel, ".go") {
			// Go code runs package managers only through exec; other mentions are text for
			// guests (the seed's vendor-data runs inside the VM, where it belongs).
			calls = execCalls(calls)
		}
		if rel == installStep {
			sawInstallStep = len(calls) > 0
			continue
		}
		for _, c := range calls {
			t.Errorf("%s runs a package manager (%q): add the package to cluster/packages/debian.txt "+
				"and call %s [--check] instead", rel, c, installStep)
		}
	}
	if !sawInstallStep {
		t.Errorf("%s was not found or runs no apt-get: the check is not looking at the right files", installStep)
	}
}

// TestInstallStepRefusesInsideANetworkNamespace runs the install step in a new, empty network
// namespace with a package list naming a package that is not installed: it must refuse (no
// DNS there) rather than try apt-get.
func TestInstallStepRefusesInsideANetworkNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (unshare --net); CI runs as root")
		}
		t.Skip("SKIPPED LOUDLY: needs root for unshare --net")
	}
	root := repoRoot(t)
	list := filepath.Join(t.TempDir(), "debian.txt")
	if err := os.WriteFile(list, []byte("# test\ncoreutils sha256sum x\nprovider-kvm-no-such-package /nonexistent x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--net", filepath.Join(root, installStep))
	cmd.Env = append(os.Environ(), "PACKAGE_LIST="+list)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("install step succeeded inside a new network namespace:\n%s", out)
	}
	if want := "refusing to run apt-get inside a network namespace"; !strings.Contains(string(out), want) {
		t.Errorf("install step output lacks %q:\n%s", want, out)
	}

	// --check names what is missing and installs nothing, wherever it runs.
	cmd = exec.Command("unshare", "--net", filepath.Join(root, installStep), "--check")
	cmd.Env = append(os.Environ(), "PACKAGE_LIST="+list)
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "provider-kvm-no-such-package") {
		t.Errorf("install step --check: err=%v, want a failure naming the missing package:\n%s", err, out)
	}
}

// TestPackageList checks that every row of the list has a package and a proof, and that the
// tools the scripts rely on are in it.
func TestPackageList(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "cluster/packages/debian.txt"))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string]bool{}
	for i, line := range strings.Split(string(b), "\n") {
		line = shellComment.ReplaceAllString(line, "")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 {
			t.Errorf("debian.txt:%d: want `package proof needed-by`, got %q", i+1, line)
			continue
		}
		pkgs[f[0]] = true
	}
	for _, p := range []string{"genisoimage", "libvirt-clients", "qemu-utils", "openssl", "python3", "curl", "iproute2", "mmdebstrap", "shellcheck", "make", "git"} {
		if !pkgs[p] {
			t.Errorf("debian.txt lacks %s", p)
		}
	}
}
