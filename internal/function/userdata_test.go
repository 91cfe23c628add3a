package function

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// TestUserDataPackagesCheck runs the user-data's bootcmd with sh against a fake dpkg-query:
// with squid and the guest agent installed it writes no cloud-init configuration (so
// cloud-init's packages module does nothing: no apt-get update, no network) and removes one a
// first boot left; with either missing it lists exactly the missing ones as cloud-init's
// packages, and, when the platform names apt sources, points the guest's apt at them alone
// (never when nothing is missing).
func TestUserDataPackagesCheck(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	const mirror = "deb [trusted=yes] http://192.168.122.1:8205/ ./\n# the platform's own\ndeb http://mirror.example.internal/debian bookworm main"
	bootcmd := func(t *testing.T, sources string) [][]string {
		t.Helper()
		p, err := ProxySpec{Image: ImageSpec{BaseImageName: "deb"}}.Validate()
		if err != nil {
			t.Fatal(err)
		}
		p.AptSources = sources
		ud, err := UserData(p, "web")
		if err != nil {
			t.Fatal(err)
		}
		var cc parsedUserData
		if err := yaml.UnmarshalStrict([]byte(ud), &cc); err != nil {
			t.Fatal(err)
		}
		want := 1 // the check alone; a second script with the platform's sources
		if sources != "" {
			want = 2
		}
		if len(cc.BootCmd) != want {
			t.Fatalf("bootcmd has %d entries, want %d: %q", len(cc.BootCmd), want, cc.BootCmd)
		}
		for _, c := range cc.BootCmd {
			if len(c) < 5 || c[0] != "sh" || c[1] != "-c" || c[3] != "sh" {
				t.Fatalf("bootcmd entry is not an sh -c script with arguments: %q", c)
			}
		}
		if d := cmp.Diff(GuestPackages, cc.BootCmd[0][4:]); d != "" {
			t.Fatalf("bootcmd's packages (-want +got):\n%s", d)
		}
		if sources != "" {
			if d := cmp.Diff([]string{sources}, cc.BootCmd[1][4:]); d != "" {
				t.Fatalf("bootcmd's sources (-want +got):\n%s", d)
			}
		}
		return cc.BootCmd
	}
	cases := map[string]struct {
		reason    string
		installed []string
		sources   string
		before    bool     // a file from an earlier boot is there
		want      []string // the packages of the written file; nil: no file
	}{
		"Present": {
			reason:    "The test image has both: no file, so the packages module does nothing.",
			installed: []string{"squid", "qemu-guest-agent"},
		},
		"PresentAfterInstall": {
			reason:    "A later boot, both installed by the first: the first boot's file goes.",
			installed: []string{"squid", "qemu-guest-agent"}, before: true,
		},
		"Stock": {
			reason: "A stock genericcloud image has neither: both are listed.",
			want:   []string{"squid", "qemu-guest-agent"},
		},
		"AgentOnly": {
			reason:    "An image with squid only: the agent alone is listed.",
			installed: []string{"squid"},
			want:      []string{"qemu-guest-agent"},
		},
		"StockWithMirror": {
			reason:  "A stock image and the platform's apt sources: both listed, apt pointed at the sources alone.",
			sources: mirror,
			want:    []string{"squid", "qemu-guest-agent"},
		},
		"PresentWithMirror": {
			reason:    "The platform names apt sources but nothing is missing: no file, apt untouched.",
			installed: []string{"squid", "qemu-guest-agent"},
			sources:   mirror,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cmdline := bootcmd(t, tc.sources)
			dir := t.TempDir()
			bin, conf := filepath.Join(dir, "bin"), filepath.Join(dir, "90-provider-kvm-packages.cfg")
			aptConf, aptList, aptParts := filepath.Join(dir, "apt.conf"), filepath.Join(dir, "sources.list"), filepath.Join(dir, "sources.list.d")
			if err := os.Mkdir(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			// dpkg-query -W -f='${Status}' PKG, as dpkg answers for an installed package and
			// for an unknown one.
			fake := "#!/bin/sh\ncase \" " + strings.Join(tc.installed, " ") + " \" in *\" $3 \"*) printf 'install ok installed';; *) echo \"dpkg-query: no packages found matching $3\" >&2; exit 1;; esac\n"
			if err := os.WriteFile(filepath.Join(bin, "dpkg-query"), []byte(fake), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.before {
				if err := os.WriteFile(conf, []byte("packages: [squid]\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// cloud-init runs bootcmd's entries in order, each one a shell command.
			paths := strings.NewReplacer(PackagesConfig, conf, AptSourcesConf, aptConf, AptSourcesList, aptList, AptSourcesParts, aptParts)
			for _, c := range cmdline {
				args := append([]string{}, c[1:]...)
				args[1] = paths.Replace(args[1])
				cmd := exec.Command(sh, args...)
				cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH")}
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("bootcmd %q: %v\n%s", c[2], err, out)
				}
			}
			var got []string
			if b, err := os.ReadFile(conf); err == nil {
				var c struct {
					Packages []string `json:"packages"`
				}
				if err := yaml.UnmarshalStrict(b, &c); err != nil {
					t.Fatalf("%s is not cloud-init configuration: %v\n%s", PackagesConfig, err, b)
				}
				got = c.Packages
				if got == nil {
					got = []string{}
				}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("%s\npackages written (-want +got; nil: no file):\n%s", tc.reason, d)
			}
			// apt's configuration: written only when a package is missing and the platform
			// names sources; then the sources file holds them, and apt reads it and the
			// (empty) parts directory instead of the image's.
			var wantConf, wantList string
			if tc.want != nil && tc.sources != "" {
				wantConf = "// provider-kvm: the platform's apt sources (ProxyPolicy packages.aptSources)\n" +
					"Dir::Etc::SourceList \"" + aptList + "\";\nDir::Etc::SourceParts \"" + aptParts + "\";\n"
				wantList = tc.sources + "\n"
			}
			for _, f := range []struct{ path, want string }{{aptConf, wantConf}, {aptList, wantList}} {
				b, _ := os.ReadFile(f.path)
				if d := cmp.Diff(f.want, string(b)); d != "" {
					t.Errorf("%s\n%s (-want +got; empty: no file):\n%s", tc.reason, filepath.Base(f.path), d)
				}
			}
			if _, err := os.Stat(aptParts); (err == nil) != (wantConf != "") {
				t.Errorf("%s\nthe empty sources.list.d %s: exists %v, want %v", tc.reason, aptParts, err == nil, wantConf != "")
			}
		})
	}
}
