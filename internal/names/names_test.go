package names

import (
	"strings"
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

func TestSeedContent(t *testing.T) {
	uid := "0123abcd-4567-89ef"
	sum := strings.Repeat("ab", 32)
	other := strings.Repeat("cd", 32)
	v := SeedContent("team-a", "web", uid, sum)
	if want := "team-a_web-0123abcd-abababababababab.seed.iso"; v != want {
		t.Fatalf("SeedContent() = %q, want %q", v, want)
	}
	if SeedContent("team-a", "web", uid, other) == v {
		t.Error("two contents share a volume")
	}
	for _, bad := range []string{"", "abc", strings.Repeat("A", 64), strings.Repeat("g", 64), sum + "0"} {
		if got := SeedContent("team-a", "web", uid, bad); got != "" {
			t.Errorf("SeedContent(digest %q) = %q, want \"\"", bad, got)
		}
	}
	cases := map[string]struct {
		vol  string
		want bool
	}{
		"Content":       {vol: v, want: true},
		"Legacy":        {vol: SeedVolume("team-a", "web", uid), want: true},
		"OtherResource": {vol: SeedContent("team-a", "web2", uid, sum), want: false},
		"OtherNS":       {vol: SeedContent("team-b", "web", uid, sum), want: false},
		"OtherUID":      {vol: SeedContent("team-a", "web", "ffffffff-0000", sum), want: false},
		"ShortDigest":   {vol: "team-a_web-0123abcd-abab.seed.iso", want: false},
		"UpperDigest":   {vol: "team-a_web-0123abcd-ABABABABABABABAB.seed.iso", want: false},
		"Overlay":       {vol: Overlay("team-a", "web", uid), want: false},
		"Traversal":     {vol: "../team-a_web-0123abcd.seed.iso", want: false},
	}
	for name, tc := range cases {
		if got := IsSeedVolumeOf(tc.vol, "team-a", "web", uid); got != tc.want {
			t.Errorf("%s: IsSeedVolumeOf(%q) = %v, want %v", name, tc.vol, got, tc.want)
		}
	}
}

func TestCheckLength(t *testing.T) {
	ns := strings.Repeat("n", 63)
	cases := map[string]struct {
		namespace, name string
		wantErr         bool
	}{
		"Short":           {namespace: "team-a", name: "web"},
		"AdmissionMax":    {namespace: ns, name: strings.Repeat("a", 150)},
		"TooLong":         {namespace: ns, name: strings.Repeat("a", 151), wantErr: true},
		"LongNameShortNS": {namespace: "a", name: strings.Repeat("a", 212)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := CheckLength(tc.namespace, tc.name)
			if (err != nil) != tc.wantErr {
				t.Fatalf("CheckLength(...) = %v, want error: %v", err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), tc.name) {
				t.Error("the message repeats the name")
			}
			if err == nil {
				// Every derived name fits a file name.
				uid := "4b1e6a2c-0000-0000-0000-000000000001"
				for _, n := range []string{SeedContent(tc.namespace, tc.name, uid, strings.Repeat("a", 64)) + ".owner", Overlay(tc.namespace, tc.name, uid) + ".owner", Domain(tc.namespace, tc.name) + "_VARS.fd"} {
					if len(n) > 255 {
						t.Errorf("%s is %d bytes", n, len(n))
					}
				}
			}
		})
	}
}
