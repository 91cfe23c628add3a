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
// packages.
func TestUserDataPackagesCheck(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	p, err := ProxySpec{Image: ImageSpec{BaseImageName: "deb"}}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	ud, err := UserData(p, "web")
	if err != nil {
		t.Fatal(err)
	}
	var cc parsedUserData
	if err := yaml.UnmarshalStrict([]byte(ud), &cc); err != nil {
		t.Fatal(err)
	}
	if len(cc.BootCmd) != 1 || len(cc.BootCmd[0]) < 4 || cc.BootCmd[0][0] != "sh" || cc.BootCmd[0][1] != "-c" {
		t.Fatalf("bootcmd is not one sh -c script: %q", cc.BootCmd)
	}
	if d := cmp.Diff(GuestPackages, cc.BootCmd[0][4:]); d != "" {
		t.Fatalf("bootcmd's packages (-want +got):\n%s", d)
	}
	cases := map[string]struct {
		reason    string
		installed []string
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
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			bin, conf := filepath.Join(dir, "bin"), filepath.Join(dir, "90-provider-kvm-packages.cfg")
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
			args := append([]string{}, cc.BootCmd[0][1:]...)
			args[1] = strings.ReplaceAll(args[1], PackagesConfig, conf)
			cmd := exec.Command(sh, args...)
			cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH")}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("bootcmd: %v\n%s", err, out)
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
		})
	}
}
