package function

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	xpv2 "github.com/crossplane/crossplane/apis/v2/core/v2"
	"github.com/crossplane/function-sdk-go/resource/composed"

	"github.com/provider-kvm/provider-kvm/apis/v1alpha1"
)

// Names of the composed resources in the Composition (annotation
// crossplane.io/composition-resource-name). They are part of the contract with existing
// XRs: renaming one makes Crossplane delete and re-create that resource.
const (
	ResourceBaseImage = "base-image"
	ResourceSeed      = "seed"
	ResourceDomain    = "domain"
	ResourceSecret    = "secret"
)

// Secret keys written for applications.
const (
	SecretKeyURL  = "url"
	SecretKeyHost = "host"
	SecretKeyPort = "port"
)

// maxNameLen keeps composed names short enough to serve as a host name label and as part of
// libvirt volume names.
const maxNameLen = 63

// Names are the metadata.names of a proxy's composed resources. They derive from the XR's
// name only, so they are stable across reconciles and predictable for users.
type Names struct {
	Domain    string // the KVMDomain; also the guest's host name
	Seed      string // the SeedVolume
	BaseImage string // the BaseImage, when the proxy caches its own image
	Secret    string // the Secret with url, host and port
}

// NamesFor returns the composed names for an XR name.
func NamesFor(xr string) Names {
	return Names{
		Domain:    childName(xr, ""),
		Seed:      childName(xr, "-seed"),
		BaseImage: childName(xr, "-image"),
		Secret:    childName(xr, "-proxy"),
	}
}

// childName is base+suffix when that fits maxNameLen, else base cut short, a hash of the
// whole base (so different long names stay different) and the suffix. Kubernetes names of
// XRs are lower-case DNS subdomains, so the result is one too.
func childName(base, suffix string) string {
	if len(base)+len(suffix) <= maxNameLen {
		return base + suffix
	}
	sum := sha256.Sum256([]byte(base))
	h := hex.EncodeToString(sum[:])[:8]
	keep := maxNameLen - len(suffix) - len(h) - 1
	cut := strings.TrimRight(base[:keep], "-.")
	return cut + "-" + h + suffix
}

func providerConfigRef(p Proxy) *xpv2.ProviderConfigReference {
	return &xpv2.ProviderConfigReference{Kind: v1alpha1.ClusterProviderConfigKind, Name: p.Host}
}

// BaseImage is the BaseImage a proxy caches when it names an image URL.
func BaseImage(p Proxy, n Names, ns string) *v1alpha1.BaseImage {
	bi := &v1alpha1.BaseImage{}
	bi.SetGroupVersionKind(v1alpha1.BaseImageGroupVersionKind)
	bi.SetName(n.BaseImage)
	bi.SetNamespace(ns)
	bi.Spec.ProviderConfigReference = providerConfigRef(p)
	bi.Spec.ForProvider.Source = v1alpha1.ImageSource{URL: p.ImageURL, SHA256: p.ImageSHA256}
	return bi
}

// SeedVolume is the cloud-init seed of a proxy: the host name and the squid user-data.
func SeedVolume(p Proxy, n Names, ns, userData string) *v1alpha1.SeedVolume {
	sv := &v1alpha1.SeedVolume{}
	sv.SetGroupVersionKind(v1alpha1.SeedVolumeGroupVersionKind)
	sv.SetName(n.Seed)
	sv.SetNamespace(ns)
	sv.Spec.ProviderConfigReference = providerConfigRef(p)
	sv.Spec.ForProvider.Hostname = n.Domain
	sv.Spec.ForProvider.UserData = ptr.To(userData)
	return sv
}

// KVMDomain is the proxy's virtual machine. It boots the shared or the composed BaseImage
// with the composed SeedVolume and is Ready once squid answers the probe (or, without a
// probe URL, once the proxy port accepts connections).
func KVMDomain(p Proxy, n Names, ns string) *v1alpha1.KVMDomain {
	d := &v1alpha1.KVMDomain{}
	d.SetGroupVersionKind(v1alpha1.KVMDomainGroupVersionKind)
	d.SetName(n.Domain)
	d.SetNamespace(ns)
	d.Spec.ProviderConfigReference = providerConfigRef(p)
	fp := &d.Spec.ForProvider
	fp.VCPU = p.VCPU
	fp.MemoryMiB = p.MemoryMiB
	fp.DiskSizeGiB = p.DiskSizeGiB
	image := p.BaseImageName
	if image == "" {
		image = n.BaseImage
	}
	fp.BaseImageRef = &xpv2.NamespacedReference{Name: image}
	fp.SeedVolumeRef = &xpv2.NamespacedReference{Name: n.Seed}
	if p.ProbeURL != "" {
		fp.ReadinessProbe = &v1alpha1.ReadinessProbe{HTTPProxy: &v1alpha1.HTTPProxyProbe{
			Port: p.Port, URL: p.ProbeURL, ExpectedStatus: p.ProbeStatus,
		}}
	} else {
		fp.ReadinessProbe = &v1alpha1.ReadinessProbe{TCP: &v1alpha1.TCPProbe{Port: p.Port}}
	}
	return d
}

// Endpoint is where applications reach a proxy.
type Endpoint struct {
	Host string
	Port int32
}

// URL is http://host:port.
func (e Endpoint) URL() string {
	return "http://" + e.Host + ":" + strconv.Itoa(int(e.Port))
}

// Data is the Secret data (and the connection details) of the endpoint.
func (e Endpoint) Data() map[string][]byte {
	return map[string][]byte{
		SecretKeyURL:  []byte(e.URL()),
		SecretKeyHost: []byte(e.Host),
		SecretKeyPort: []byte(strconv.Itoa(int(e.Port))),
	}
}

// Secret is the Secret applications mount to find the proxy.
func Secret(n Names, ns string, data map[string][]byte) *composed.Unstructured {
	enc := make(map[string]any, len(data))
	for k, v := range data {
		enc[k] = base64.StdEncoding.EncodeToString(v)
	}
	s := composed.New()
	s.Object = map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata":   map[string]any{"name": n.Secret, "namespace": ns},
		"type":       "Opaque",
		"data":       enc,
	}
	return s
}

// toComposed converts one of our typed managed resources into a desired composed resource.
// The typed structs keep the function in step with the API at compile time. The conversion
// drops what a function must not claim with server-side apply: the empty status and the
// null creationTimestamp.
func toComposed(o runtime.Object) (*composed.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, errors.Errorf("cannot convert %s: %w", o.GetObjectKind().GroupVersionKind().Kind, err)
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	u := composed.New()
	u.Object = m
	return u, nil
}
