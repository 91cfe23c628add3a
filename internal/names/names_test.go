package names

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNames(t *testing.T) {
	const uid = "6c1f0b6e-3d2a-4c55-9f0e-1a2b3c4d5e6f"
	got := []string{
		Domain("team-a", "proxy-1"),
		SeedVolume("team-a", "proxy-1", uid),
		Overlay("team-a", "proxy-1", uid),
		InstanceID(uid),
	}
	want := []string{
		"team-a_proxy-1",
		"team-a_proxy-1-6c1f0b6e.seed.iso",
		"team-a_proxy-1-6c1f0b6e.root.qcow2",
		"i-6c1f0b6e3d2a4c559f0e1a2b3c4d5e6f",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-want, +got:\n%s", diff)
	}
	// Namespaces and names that would collide with a plain "-" separator do not.
	if Domain("a-b", "c") == Domain("a", "b-c") {
		t.Error("Domain() collides across namespaces")
	}
	if SeedVolume("ns", "n", uid) == SeedVolume("ns", "n", "ffffffff-0000") {
		t.Error("SeedVolume() does not tell a recreated resource from its predecessor")
	}
}
