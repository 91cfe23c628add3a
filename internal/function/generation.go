package function

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/crossplane/function-sdk-go/resource"
)

// A generation is one rendition of a Proxy's VM: its SeedVolume, KVMDomain and (when the
// Proxy caches its own image) BaseImage, named with the generation's id. What defines the VM
// is hashed into that id (GenerationID); a change of any of it composes a new generation
// beside the serving one, which takes over only once Ready (rollout.go).
//
// Proxies composed before generations existed have one generation under the names without an
// id (<xr>, <xr>-seed, <xr>-image; resource names domain, seed, base-image): the legacy
// generation. It is read back from its observed resources, so that it keeps serving, as it
// is, until the spec changes.

// genIDLen is the length of a generation id, in hex characters.
const genIDLen = 8

// Def is what defines a generation's VM: a change of any field needs a new VM.
type Def struct {
	Host        string `json:"host"`
	BaseImage   string `json:"baseImage,omitempty"` // a shared BaseImage of the namespace
	ImageURL    string `json:"imageURL,omitempty"`  // or the image the Proxy caches
	ImageSHA256 string `json:"imageSHA256,omitempty"`
	VCPU        int32  `json:"vcpu"`
	MemoryMiB   int32  `json:"memoryMiB"`
	DiskSizeGiB int32  `json:"diskSizeGiB,omitempty"` // 0: the image's size
	Port        int32  `json:"port"`
	Probe       string `json:"probe,omitempty"` // url and expected status; "" a TCP probe
	UserData    string `json:"userData"`        // the seed's rendered content
	// The network or bridge the VM attaches to (the platform's defaultAttachment); both empty:
	// the host's default. Omitted when empty, so the ids of Proxies without one do not change.
	Network string `json:"network,omitempty"`
	Bridge  string `json:"bridge,omitempty"`
}

// DefOf is the definition of the generation Proxy p (placed) with this user data wants.
func DefOf(p Proxy, userData string) Def {
	d := Def{Host: p.Host, BaseImage: p.BaseImageName, ImageURL: p.ImageURL, ImageSHA256: p.ImageSHA256, VCPU: p.VCPU, MemoryMiB: p.MemoryMiB, Port: p.Port, UserData: userData,
		Network: p.Network, Bridge: p.Bridge}
	if p.DiskSizeGiB != nil {
		d.DiskSizeGiB = *p.DiskSizeGiB
	}
	if p.ProbeURL != "" {
		d.Probe = probeOf(p.ProbeURL, p.ProbeStatus)
	}
	return d
}

// Proxy is the Proxy that renders this definition's VM, placed on its host.
func (d Def) Proxy() Proxy {
	p := Proxy{Host: d.Host, BaseImageName: d.BaseImage, ImageURL: d.ImageURL, ImageSHA256: d.ImageSHA256,
		VCPU: d.VCPU, MemoryMiB: d.MemoryMiB, Port: d.Port, Network: d.Network, Bridge: d.Bridge}
	if d.DiskSizeGiB != 0 {
		disk := d.DiskSizeGiB
		p.DiskSizeGiB = &disk
	}
	if url, st, ok := strings.Cut(d.Probe, " "); ok {
		code, _ := strconv.ParseInt(st, 10, 32)
		p.ProbeURL, p.ProbeStatus = url, int32(code)
	}
	return p
}

func probeOf(url string, status int32) string { return url + " " + strconv.Itoa(int(status)) }

// GenerationID is the short id of a definition: equal definitions have equal ids.
func GenerationID(d Def) string {
	b, err := json.Marshal(d)
	if err != nil { // a struct of strings and integers always encodes
		b = []byte(fmt.Sprintf("%#v", d))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])[:genIDLen]
}

// ChangedFields names the Proxy fields whose change makes definition b differ from a, in a
// stable order; the seed's content changes with the squid settings and the platform's rules.
func ChangedFields(a, b Def) []string {
	var out []string
	add := func(changed bool, field string) {
		if changed {
			out = append(out, field)
		}
	}
	add(a.Host != b.Host, "host")
	add(a.BaseImage != b.BaseImage || a.ImageURL != b.ImageURL || a.ImageSHA256 != b.ImageSHA256, "image")
	add(a.VCPU != b.VCPU, "vcpu")
	add(a.MemoryMiB != b.MemoryMiB, "memoryMiB")
	add(a.DiskSizeGiB != b.DiskSizeGiB, "diskSizeGiB")
	add(a.Port != b.Port, "port")
	add(a.Probe != b.Probe, "probe")
	add(a.Network != b.Network || a.Bridge != b.Bridge, "attachment (the platform's defaultAttachment)")
	if a.UserData != b.UserData && a.Port == b.Port {
		// The port is in the seed too: name the seed only when something else changed it.
		out = append(out, "squid configuration (allowedCIDRs, allowedDomains, squidDirectives, sshAuthorizedKeys or the platform's rules)")
	}
	return out
}

// Keys of a generation's composed resources in the Composition: the legacy generation's are
// the resource names of old; a generation's carry its id.
type genKeys struct {
	Domain, Seed, BaseImage resource.Name
}

func keysFor(id string, legacy bool) genKeys {
	if legacy {
		return genKeys{Domain: ResourceDomain, Seed: ResourceSeed, BaseImage: ResourceBaseImage}
	}
	return genKeys{
		Domain:    resource.Name(ResourceDomain + "-" + id),
		Seed:      resource.Name(ResourceSeed + "-" + id),
		BaseImage: resource.Name(ResourceBaseImage + "-" + id),
	}
}

// genNames are the metadata.names of a generation's resources. The guest's host name stays
// the Proxy's (n.Domain) in every generation.
func genNames(n Names, base, id string, legacy bool) Names {
	if legacy {
		return n
	}
	g := n
	g.Domain = childName(base, "-"+id)
	g.Seed = childName(base, "-"+id+"-seed")
	g.BaseImage = childName(base, "-"+id+"-image")
	return g
}

// generation is one generation as observed.
type generation struct {
	id      string
	replica int // the replica it serves (replicas.go); 0 the one the Secret names
	legacy  bool
	keys    genKeys
	def     Def
	// known: def was read back (always for a generation composed with an id, whose
	// definition is its annotation).
	known  bool
	exists bool // its KVMDomain is observed
	ready  bool
	// unconfirmed: its KVMDomain says Ready, but its host is not Ready, so that is not known
	// now (ready is false, phase PhaseHostNotReady).
	unconfirmed bool
	ip          string
	phase       string
	message     string
	created     time.Time // its KVMDomain's creation; zero when unknown
}

// LabelGeneration on a generation's composed resources is its id.
const LabelGeneration = "proxy.kvm.crossplane.io/generation"

// observedGenerations finds the generations among the observed composed resources: the
// legacy one and every domain-<id>/seed-<id>/base-image-<id>. A legacy generation whose
// definition cannot be read back (its KVMDomain shows no forProvider) is taken to be want,
// the desired one: it is never replaced on a guess. (The SeedVolume of a generation that
// is not observed yet reads as unknown, but such a generation is new, never legacy.)
//
// Replica r (above 0) has no legacy generation: its resources are domain-r<r>-<id> and
// seed-r<r>-<id> (replicas.go).
func observedGenerations(observed map[resource.Name]resource.ObservedComposed, replica int, composesImage bool, want Def, wantID string) map[string]*generation {
	gens := map[string]*generation{}
	for name := range observed {
		s := string(name)
		for _, prefix := range []string{ResourceSeed + "-" + replicaInfix(replica), ResourceDomain + "-" + replicaInfix(replica)} {
			if id, ok := strings.CutPrefix(s, prefix); ok && len(id) == genIDLen && gens[id] == nil {
				gens[id] = &generation{id: id, replica: replica, keys: keysForReplica(replica, id), known: true}
				break
			}
		}
	}
	for _, g := range gens {
		g.def, _ = readDef(observed, g.keys)
	}
	if _, ok := observed[ResourceDomain]; ok && replica == 0 {
		def, known := readDef(observed, keysFor("", true))
		g := &generation{legacy: true, keys: keysFor("", true), def: def, known: known, id: wantID}
		if known {
			g.id = GenerationID(def)
		} else {
			g.def = want
		}
		gens[g.id] = g
	}
	for _, g := range gens {
		if d, ok := observed[g.keys.Domain]; ok {
			ref, _ := d.Resource.GetString("spec.forProvider.baseImageRef.name")
			if key, _ := composedImage(observed, ref); key != "" {
				g.keys.BaseImage = key
			}
		}
		g.observe(observed, composesImage)
	}
	return gens
}

// readDef reads a generation's definition back from its observed KVMDomain, SeedVolume and
// BaseImage. ok is false when they do not show all the function always writes (the vCPUs,
// memory, probe port and seed content): then there is nothing to compare.
func readDef(observed map[resource.Name]resource.ObservedComposed, k genKeys) (Def, bool) {
	var d Def
	dom, ok := observed[k.Domain]
	if !ok {
		return d, false
	}
	u := dom.Resource
	if _, err := u.GetValue("spec.forProvider"); err != nil {
		return d, false
	}
	d.Host, _ = u.GetString("spec.providerConfigRef.name")
	vcpu, _ := u.GetInteger("spec.forProvider.vcpu")
	mem, _ := u.GetInteger("spec.forProvider.memoryMiB")
	disk, _ := u.GetInteger("spec.forProvider.diskSizeGiB")
	d.VCPU, d.MemoryMiB, d.DiskSizeGiB = int32(vcpu), int32(mem), int32(disk)
	d.BaseImage, _ = u.GetString("spec.forProvider.baseImageRef.name")
	d.Network, _ = u.GetString("spec.forProvider.network")
	d.Bridge, _ = u.GetString("spec.forProvider.bridge")
	if key, img := composedImage(observed, d.BaseImage); key != "" {
		d.BaseImage = ""
		d.ImageURL, _ = img.Resource.GetString("spec.forProvider.source.url")
		d.ImageSHA256, _ = img.Resource.GetString("spec.forProvider.source.sha256")
	}
	if port, err := u.GetInteger("spec.forProvider.readinessProbe.httpProxy.port"); err == nil {
		url, _ := u.GetString("spec.forProvider.readinessProbe.httpProxy.url")
		st, _ := u.GetInteger("spec.forProvider.readinessProbe.httpProxy.expectedStatus")
		d.Port, d.Probe = int32(port), probeOf(url, int32(st))
	} else {
		port, _ := u.GetInteger("spec.forProvider.readinessProbe.tcp.port")
		d.Port = int32(port)
	}
	seed, ok := observed[k.Seed]
	if !ok {
		return d, false
	}
	var err error
	if d.UserData, err = seed.Resource.GetString("spec.forProvider.userData"); err != nil || d.VCPU == 0 || d.MemoryMiB == 0 || d.Port == 0 {
		return d, false // not all of what the function always writes: nothing to compare
	}
	return d, true
}

// composedImage is the observed BaseImage this Proxy composed under the name name: its
// resource name ("" none) and the resource.
func composedImage(observed map[resource.Name]resource.ObservedComposed, name string) (resource.Name, resource.ObservedComposed) {
	for key, o := range observed {
		if (key == ResourceBaseImage || strings.HasPrefix(string(key), ResourceBaseImage+"-")) && o.Resource.GetName() == name && name != "" {
			return key, o
		}
	}
	return "", resource.ObservedComposed{}
}

// imageFor is the resource name and metadata.name of the BaseImage a generation of def
// composes: one the Proxy composed already for the same url and sha256 (a generation
// changing something else shares it), else base-image-<hash of url and sha256> named
// <xr>-image-<hash>.
//
// A replica above 0 on another host needs the image on its own host: only an image on def's
// host is shared, and a replica's own is base-image-<hash of url, sha256 and host>.
func imageFor(observed map[resource.Name]resource.ObservedComposed, base string, def Def, replica int) (resource.Name, string) {
	keys := make([]string, 0, len(observed))
	for key := range observed {
		keys = append(keys, string(key))
	}
	sort.Strings(keys)
	for _, key := range keys {
		o := observed[resource.Name(key)]
		if key != ResourceBaseImage && !strings.HasPrefix(key, ResourceBaseImage+"-") {
			continue
		}
		url, _ := o.Resource.GetString("spec.forProvider.source.url")
		sum, _ := o.Resource.GetString("spec.forProvider.source.sha256")
		host, _ := o.Resource.GetString("spec.providerConfigRef.name")
		if url == def.ImageURL && sum == def.ImageSHA256 && (host == def.Host || host == "") {
			return resource.Name(key), o.Resource.GetName()
		}
	}
	key := def.ImageURL + "@" + def.ImageSHA256
	if replica > 0 {
		key += "@" + def.Host
	}
	sum := sha256.Sum256([]byte(key))
	id := hex.EncodeToString(sum[:])[:genIDLen]
	return resource.Name(ResourceBaseImage + "-" + id), childName(base, "-image-"+id)
}

// observe reads the generation's KVMDomain: its phase, address and creation.
func (g *generation) observe(observed map[resource.Name]resource.ObservedComposed, composesImage bool) {
	g.phase = PhaseCreating
	d, ok := observed[g.keys.Domain]
	if !ok {
		return
	}
	g.exists = true
	if ts := d.Resource.GetCreationTimestamp(); !ts.IsZero() {
		g.created = ts.Time
	}
	ip, _ := d.Resource.GetString("status.atProvider.ipv4")
	g.ip = ipv4(ip)
	g.phase, g.message = domainPhase(observed, d, g.ip != "", composesImage, g.keys)
	g.ready = g.phase == PhaseReady
}

// sortedIDs are the ids of gens, ordered.
func sortedIDs(gens map[string]*generation) []string {
	ids := make([]string, 0, len(gens))
	for id := range gens {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
