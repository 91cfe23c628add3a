//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestContainerProcess: the provider's process is found by its container's cgroup and judged
// by its status lines as the kernel writes them.
func TestContainerProcess(t *testing.T) {
	const id = "3f1c0ffee"
	status := func(uid, nnp, capEff string) string {
		return "Name:\tprovider\nUid:\t" + uid + "\nGid:\t2000\t2000\t2000\t2000\nNoNewPrivs:\t" + nnp + "\nCapEff:\t" + capEff + "\n"
	}
	cases := map[string]struct {
		procs   map[string][2]string // pid: cgroup, status
		want    string               // what unprivileged says, or the error
		wantPID int
	}{
		"unprivileged": {
			procs: map[string][2]string{
				"10": {"0::/other\n", status("0\t0\t0\t0", "0", "000001ffffffffff")},
				"42": {"0::/provider-kvm-node/kubepods/pod1/" + id + "\n", status("2000\t2000\t2000\t2000", "1", "0000000000000000")},
			},
			wantPID: 42,
		},
		"root with capabilities": {
			procs:   map[string][2]string{"7": {"12:pids:/kubepods/" + id + "\n", status("0\t0\t0\t0", "0", "00000000a80425fb")}},
			want:    "Uid 0 0 0 0, NoNewPrivs 0, CapEff 00000000a80425fb",
			wantPID: 7,
		},
		"no such container": {
			procs: map[string][2]string{"7": {"0::/other\n", status("2000\t2000\t2000\t2000", "1", "0")}},
			want:  "no process of container " + id,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			for pid, f := range tc.procs {
				dir := filepath.Join(root, pid)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(f[0]), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "status"), []byte(f[1]), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			st, err := containerProcess(root, id)
			got, pid := "", st.PID
			switch {
			case err != nil && tc.want != "" && strings.HasPrefix(err.Error(), tc.want):
				got = tc.want
			case err != nil:
				got = err.Error()
			default:
				got = st.unprivileged(2000)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("-want +got:\n%s", diff)
			}
			if pid != tc.wantPID {
				t.Errorf("PID %d, want %d", pid, tc.wantPID)
			}
		})
	}
}
