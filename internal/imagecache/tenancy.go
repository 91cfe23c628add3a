package imagecache

import (
	"fmt"
	"strings"
)

// What a namespace may learn of a base volume's users. The users of a shared volume may be
// of any namespace; a BaseImage's messages name those of its own namespace (names derive from
// "<namespace>_", internal/names) and only count the others: never their volume or domain
// names, nor host paths of their disks.

// usageView is a Usage as one namespace sees it.
type usageView struct {
	// OwnUsers and OwnDoubts name the namespace's own volumes and domains.
	OwnUsers, OwnDoubts []string
	// OtherUsers and OtherDoubts count those of other namespaces (or not made by us).
	OtherUsers, OtherDoubts int
	// HostDoubts name no volume or domain (a pool that is inactive or cannot be read).
	HostDoubts []string
}

// viewUsage splits u for namespace ns ("" owns nothing).
func viewUsage(u Usage, ns string) usageView {
	var v usageView
	for _, e := range u.Users {
		if o, named := entryObject(e); named && ownedBy(o, ns) {
			v.OwnUsers = append(v.OwnUsers, e)
		} else {
			v.OtherUsers++
		}
	}
	for _, e := range u.Doubts {
		o, named := entryObject(e)
		switch {
		case !named:
			v.HostDoubts = append(v.HostDoubts, e)
		case ownedBy(o, ns):
			v.OwnDoubts = append(v.OwnDoubts, e)
		default:
			v.OtherDoubts++
		}
	}
	return v
}

// entryObject is the name of the volume or domain a Usage entry is about ("volume POOL/NAME",
// "domain NAME ..."); named is false for an entry about neither (a pool).
func entryObject(e string) (string, bool) {
	if rest, ok := strings.CutPrefix(e, "volume "); ok {
		_, name, _ := strings.Cut(rest, "/")
		name, _, _ = strings.Cut(name, " ")
		return name, true
	}
	if rest, ok := strings.CutPrefix(e, "domain "); ok {
		name, _, _ := strings.Cut(rest, " ")
		return name, true
	}
	return "", false
}

// ownedBy is true when object (a volume or domain name) is one the provider made for a
// resource of namespace ns.
func ownedBy(object, ns string) bool {
	return ns != "" && strings.HasPrefix(object, ns+"_")
}

// plural is "n thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", thing)
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// visibleDoubts are the doubts namespace ns may read: its own and the host's named, the
// others counted.
func visibleDoubts(doubts []string, ns string) []string {
	v := viewUsage(Usage{Doubts: doubts}, ns)
	out := append(append([]string(nil), v.OwnDoubts...), v.HostDoubts...)
	if v.OtherDoubts > 0 {
		out = append(out, plural(v.OtherDoubts, "disk")+" of other namespaces that cannot be checked")
	}
	return out
}
