//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestQuickstartSteps: the quickstart's shell blocks are cut into their numbered steps, and
// what is no quickstart is refused.
func TestQuickstartSteps(t *testing.T) {
	const head = "# x\n\n" + quickstartHeading + "\n\nText.\n\n"
	cases := map[string]struct {
		readme  string
		want    []qsStep
		wantErr string
	}{
		"two blocks, three steps": {
			readme: head + "```sh\n# 1. Build.\nmake\n\n# 2. Install.\nkubectl apply -f a\n```\n\nMore text.\n\n```sh\n# 3. Use.\nkubectl get x\n```\n\n## Next\n\n```sh\n# 4. Not this.\n```\n",
			want: []qsStep{
				{N: 1, Title: "Build.", Script: "# 1. Build.\nmake\n\n"},
				{N: 2, Title: "Install.", Script: "# 2. Install.\nkubectl apply -f a\n"},
				{N: 3, Title: "Use.", Script: "# 3. Use.\nkubectl get x\n"},
			},
		},
		"other blocks are not run": {
			readme: head + "```yaml\n# 1. no\n```\n```sh\n# Comments first.\n# 1. Yes.\nls\n```\n",
			want:   []qsStep{{N: 1, Title: "Yes.", Script: "# 1. Yes.\nls\n"}},
		},
		"no section":            {readme: "# x\n```sh\n# 1. a\n```\n", wantErr: "has no section"},
		"no steps":              {readme: head + "```sh\nls\n```\n", wantErr: "a command before the quickstart's step 1"},
		"no numbered step":      {readme: head + "```sh\n# a comment\n```\n", wantErr: "no numbered steps"},
		"steps out of order":    {readme: head + "```sh\n# 1. a\n# 3. c\n```\n", wantErr: "step 3 follows step 1"},
		"an unclosed sh block":  {readme: head + "```sh\n# 1. a\nls\n", wantErr: "not closed"},
		"a step 2 before step1": {readme: head + "```sh\n# 2. b\n```\n", wantErr: "step 2 follows step 0"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := quickstartSteps(tc.readme)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("steps: -want +got:\n%s", diff)
			}
		})
	}
}

// TestQuickstart applies nothing (make e2e's preflight runs it): README.md's quickstart has
// its four steps, each still holds what make e2e substitutes in it, and the test bed's copies
// of the example files it applies are written with the test bed's addresses and no example
// address left; a README step that lost a substituted text fails.
func TestQuickstart(t *testing.T) {
	e := &env{cfg: defaultConfig(), imageSHA256: strings.Repeat("a", 64), probeURL: "http://10.77.0.10:18204/"}
	e.guestCIDR, e.cfg.ImageHost, e.cfg.NodeRegistry = "10.77.0.0/24", "10.77.0.10", "10.77.0.10:25000"
	e.cfg.SSHKey = "/var/lib/provider-kvm-lan/ssh/id_ed25519"
	e.cfg.Hosts = []hostConfig{{Name: "default", SSHHost: "10.77.0.11", SSHPort: 22, Pool: "pool-host-a", Bridge: "br0"}}
	b, err := os.ReadFile(filepath.Join(e.cfg.Repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps, err := quickstartSteps(string(b))
	if err != nil {
		t.Fatal(err)
	}
	var titles []int
	for _, s := range steps {
		titles = append(titles, s.N)
	}
	if diff := cmp.Diff([]int{1, 2, 3, 4}, titles); diff != "" {
		t.Errorf("the quickstart's steps: -want +got:\n%s", diff)
	}
	vals := e.quickstartValues()
	texts := map[int]string{}
	for _, s := range steps {
		text, err := substituteStep(s, vals)
		if err != nil {
			t.Fatal(err)
		}
		texts[s.N] = text
	}
	for n, want := range map[int][]string{
		1: {"REG=10.77.0.10:25000/provider-kvm", "make xpkg VERSION=v0.1.0"},
		2: {"xpkg install configuration xpkg.crossplane.io/provider-kvm/configuration-kvm-proxy:v0.1.0"},
		3: {"ssh-privatekey=/var/lib/provider-kvm-lan/ssh/id_ed25519", "<(ssh-keyscan 10.77.0.11)", "examples/provider/clusterproviderconfig.yaml"},
		4: {"examples/proxy/shared-image.yaml", "proxy/egress-a", "examples/app/proxy-client.yaml", "logs proxy-client"},
	} {
		for _, w := range want {
			if !strings.Contains(texts[n], w) {
				t.Errorf("step %d does not contain %q:\n%s", n, w, texts[n])
			}
		}
	}
	for _, gone := range []string{"example.org", "$HOME/.ssh"} {
		for n, text := range texts {
			if strings.Contains(text, gone) {
				t.Errorf("step %d still has %q:\n%s", n, gone, text)
			}
		}
	}
	broken := steps[2]
	broken.Script = strings.ReplaceAll(broken.Script, "kvm-host-1.example.org", "my-host")
	if _, err := substituteStep(broken, vals); err == nil || !strings.Contains(err.Error(), "no longer contains") {
		t.Errorf("a step 3 that names another host: %v, want an error saying what it lost", err)
	}

	dir := t.TempDir()
	if err := e.writeQuickstartExamples(dir, vals); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string][]string{
		exCPCFile: {"host: 10.77.0.11", "pool: pool-host-a", "bridge: br0", "bridgeCIDRs: [10.77.0.0/24]",
			"- cidr: 10.77.0.10/32", "ports: [18090, 18443, 18444]", "domainType: qemu"},
		exSharedImage: {"http://10.77.0.10:18090/a/", "name: egress-a"},
		exAppFile:     {"name: proxy-client", "image: " + DefaultClientImage, "egress-a-proxy"},
	} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s does not contain %q:\n%s", file, w, b)
			}
		}
		for _, gone := range []string{"example.org", "10.20.30.40", "192.168.", "curlimages"} {
			if strings.Contains(string(b), gone) && (file != exCPCFile || gone != "example.org") {
				t.Errorf("%s still has %q", file, gone)
			}
		}
	}
}
