package imagecache

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

// TestInUseMessage: an in-use refusal names the acting namespace's volumes, domains and disks
// and only counts those of other namespaces: never their names or host paths.
func TestInUseMessage(t *testing.T) {
	cases := map[string]struct {
		reason string
		err    InUseError
		want   string
	}{
		"OwnNamed": {
			reason: "the namespace's own overlay and domain are named",
			err:    InUseError{Pool: "p", Volume: "v", Namespace: "team-a", Users: []string{"domain team-a_web disk vda", "volume p/team-a_web-1234abcd.root.qcow2"}},
			want:   "volume v in pool p is in use by domain team-a_web disk vda, volume p/team-a_web-1234abcd.root.qcow2; it is removed once nothing uses it",
		},
		"OthersCounted": {
			reason: "disks of other namespaces are counted, not named",
			err:    InUseError{Pool: "p", Volume: "v", Namespace: "team-a", Users: []string{"domain team-b_db disk vda", "volume p/team-b_db-1234abcd.root.qcow2"}},
			want:   "volume v in pool p is in use by 2 disks of other namespaces; it is removed once nothing uses it",
		},
		"PrefixIsNotNamespace": {
			reason: "team-a does not own team-ab's objects",
			err:    InUseError{Pool: "p", Volume: "v", Namespace: "team-a", Users: []string{"domain team-ab_db disk vda"}},
			want:   "volume v in pool p is in use by 1 disk of other namespaces; it is removed once nothing uses it",
		},
		"Mixed": {
			reason: "own named, others counted, in one message",
			err:    InUseError{Pool: "p", Volume: "v", Namespace: "team-a", Users: []string{"domain team-a_web disk vda", "domain team-b_db disk vda", "domain handmade disk sda"}},
			want:   "volume v in pool p is in use by domain team-a_web disk vda, 2 disks of other namespaces; it is removed once nothing uses it",
		},
		"NoNamespace": {
			reason: "without a namespace nothing is named",
			err:    InUseError{Pool: "p", Volume: "v", Users: []string{"domain team-a_web disk vda"}},
			want:   "volume v in pool p is in use by 1 disk of other namespaces; it is removed once nothing uses it",
		},
		"DoubtsOfOthersCounted": {
			reason: "a doubt about another namespace's disk hides its domain and host path; a pool's doubt is shown",
			err: InUseError{Pool: "p", Volume: "v", Namespace: "team-a", Doubts: []string{
				"domain team-b_db disk vda is /srv/team-b/secret.qcow2, which is in no active pool, and libvirt shows no backing chain for it while the domain is not running",
				"pool cold is inactive, so its volumes cannot be checked (start the pool, or delete it)",
			}},
			want: "volume v in pool p is kept: provider-kvm cannot rule out that an overlay backs onto it: pool cold is inactive, so its volumes cannot be checked (start the pool, or delete it); 1 disk of other namespaces cannot be checked; it is removed once that can be checked",
		},
		"OwnDoubtNamed": {
			reason: "a doubt about the namespace's own disk is shown in full",
			err:    InUseError{Pool: "p", Volume: "v", Namespace: "team-a", Doubts: []string{"domain team-a_web disk vdb is /srv/x.qcow2, which is in no active pool"}},
			want:   "volume v in pool p is kept: provider-kvm cannot rule out that an overlay backs onto it: domain team-a_web disk vdb is /srv/x.qcow2, which is in no active pool; it is removed once that can be checked",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.err.Error()); diff != "" {
				t.Errorf("%s\nError(): -want, +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// TestNeedsProof: a digest is not possession: bytes a BaseImage of another namespace
// downloaded (or is uploading) are attached only after hashing the caller's own URL.
func TestNeedsProof(t *testing.T) {
	rec := func(o Owner) *Record { return &Record{Owner: o} }
	restored := Owner{UID: "uid-new", Namespace: us.Namespace, Name: us.Name}
	cases := map[string]struct {
		img   Image
		owner *Owner // default: us
		want  bool
	}{
		// A namespace of the same name in another cluster sharing the host is another team.
		"PublishedBySameNSOtherCluster": {img: Image{State: StatePublished, Marker: rec(inCluster(restored, "cluster-b"))}, owner: ptr.To(inCluster(us, "cluster-a")), want: true},
		"PublishedBySameNSSameCluster":  {img: Image{State: StatePublished, Marker: rec(inCluster(restored, "cluster-a"))}, owner: ptr.To(inCluster(us, "cluster-a")), want: false},
		"Absent":                        {img: Image{State: StateAbsent}, want: false},
		"PublishedByUs":                 {img: Image{State: StatePublished, Marker: rec(us)}, want: false},
		"PublishedBySameNS":             {img: Image{State: StatePublished, Marker: rec(restored)}, want: false},
		"PublishedByOtherNS":            {img: Image{State: StatePublished, Marker: rec(them)}, want: true},
		"PublishedUnreadMarker":         {img: Image{State: StatePublished}, want: true},
		"UploadingByOtherNS":            {img: Image{State: StateDebris, HasClaim: true, Claim: rec(them)}, want: true},
		"UploadingByUs":                 {img: Image{State: StateDebris, HasClaim: true, Claim: rec(us)}, want: false},
		"UploadingUnreadableClaim":      {img: Image{State: StateDebris, HasClaim: true}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			owner := us
			if tc.owner != nil {
				owner = *tc.owner
			}
			if got := needsProof(tc.img, owner); got != tc.want {
				t.Errorf("needsProof(...) = %v, want %v", got, tc.want)
			}
		})
	}
	if !needsProof(Image{State: StatePublished, Marker: rec(Owner{UID: "x"})}, Owner{UID: "y"}) {
		t.Error("an owner without namespace shares nothing by namespace")
	}
}

func TestVisibleDoubts(t *testing.T) {
	cases := map[string]struct {
		doubts []string
		ns     string
		want   []string
	}{
		"OwnAndHostNamedOthersCounted": {
			doubts: []string{"volume p/ns-a_web.root.qcow2 cannot be read", "domain ns-b_db has a disk that cannot be resolved", "pool cold is inactive", "volume p/ns-c_x.root.qcow2 cannot be read"},
			ns:     "ns-a",
			want:   []string{"volume p/ns-a_web.root.qcow2 cannot be read", "pool cold is inactive", "2 disks of other namespaces that cannot be checked"},
		},
		"NoNamespaceSeesOnlyTheHost": {
			doubts: []string{"domain ns-b_db has a disk that cannot be resolved", "pool cold is inactive"},
			want:   []string{"pool cold is inactive", "1 disk of other namespaces that cannot be checked"},
		},
		"None": {ns: "ns-a"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, visibleDoubts(tc.doubts, tc.ns)); diff != "" {
				t.Errorf("visibleDoubts: -want +got:\n%s", diff)
			}
		})
	}
}
