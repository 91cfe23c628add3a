package imagecache

import (
	"context"
	"strings"
	"testing"

	"github.com/provider-kvm/provider-kvm/internal/libvirt/fakestorage"
)

func TestNamespaceImages(t *testing.T) {
	v1 := DigestVolumeName(strings.Repeat("a", 64), FormatQCOW2)
	v2 := DigestVolumeName(strings.Repeat("b", 64), FormatQCOW2)
	sibling := Owner{UID: "uid-sibling", Namespace: us.Namespace, Name: "sibling"}
	h := fakestorage.New()
	owns(t, h, v1, us)
	owns(t, h, v2, us) // one BaseImage on two volumes (a source change) is one
	owns(t, h, v1, sibling)
	owns(t, h, v1, them)
	owns(t, h, v2, gone)
	// Namespace ns-a of another cluster sharing the host: another team.
	owns(t, h, v1, Owner{UID: "uid-elsewhere", Namespace: us.Namespace, Name: "a", ClusterID: "cluster-b"})
	owns(t, h, v2, Owner{UID: "uid-here", Namespace: us.Namespace, Name: "here", ClusterID: "cluster-a"})
	h.Put(tpool, OwnerName(v2, "uid-torn"), []byte(`{"schema":1,`))
	cases := map[string]struct {
		reason  string
		cluster string
		ns      string
		except  string
		alive   Liveness
		want    int
	}{
		"Namespace":      {reason: "distinct BaseImages of the namespace (that name no cluster)", ns: us.Namespace, want: 2},
		"OwnCluster":     {reason: "with a cluster ID: the namespace's BaseImages of that cluster and of none, not another cluster's", cluster: "cluster-a", ns: us.Namespace, want: 3},
		"LeavesItself":   {reason: "the asking BaseImage's own records are not counted", ns: us.Namespace, except: us.UID, want: 1},
		"OtherNS":        {reason: "another namespace's only", ns: them.Namespace, want: 1},
		"GoneNotCounted": {reason: "a record of a BaseImage gone from the cluster is not counted", ns: gone.Namespace, alive: liveOnly(us, them, sibling), want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			opts := []Option{WithClusterID(tc.cluster)}
			if tc.alive != nil {
				opts = append(opts, WithLiveness(tc.alive))
			}
			c := newFakeCache(h, testShared(), Downloads{}, opts...)
			got, err := c.NamespaceImages(context.Background(), tpool, tc.ns, tc.except)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("%s\nNamespaceImages() = %d, want %d", tc.reason, got, tc.want)
			}
		})
	}
}
