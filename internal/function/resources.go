package function

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
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
	ResourceService   = "service"
	ResourceEndpoints = "endpoints"
	// ResourceEndpointsPrev is a second EndpointSlice of the Service, for the replicas still on
	// the old port while a port change rolls over them.
	ResourceEndpointsPrev = "endpoints-prev"
)

// Secret keys written for applications: url and host name the proxy's Service (its cluster
// DNS name), ip is the guest's own address.
const (
	SecretKeyURL  = "url"
	SecretKeyHost = "host"
	SecretKeyIP   = "ip"
	SecretKeyPort = "port"
)

// ManagedBy is the endpointslice.kubernetes.io/managed-by label of the EndpointSlices the
// function composes: not Kubernetes' own EndpointSlice controller, which leaves them alone.
const ManagedBy = "function-kvm-proxy.kvm.crossplane.io"

// servicePortName names the proxy's port on its Service and EndpointSlice.
const servicePortName = "http-proxy"

// maxNameLen keeps composed names short enough to serve as a host name label and as part of
// libvirt volume names.
const maxNameLen = 63

// Names are the metadata.names of a proxy's composed resources. They derive from the XR's
// name only, so they are stable across reconciles and predictable for users.
type Names struct {
	Domain    string // the KVMDomain; also the guest's host name
	Seed      string // the SeedVolume
	BaseImage string // the BaseImage, when the proxy caches its own image
	Secret    string // the Secret with url, host, ip and port
	Service   string // the selectorless Service and its EndpointSlice; a DNS-1035 label
}

// NamesFor returns the composed names for an XR name.
func NamesFor(xr string) Names {
	return Names{
		Domain:    childName(xr, ""),
		Seed:      childName(xr, "-seed"),
		BaseImage: childName(xr, "-image"),
		Secret:    childName(xr, "-proxy"),
		Service:   serviceName(xr),
	}
}

// serviceName is <xr>-proxy when that is a DNS-1035 label, as Service names must be (XR names
// may start with a digit or hold dots); otherwise "p" and a hash of the XR's name: stable, and
// different for different names.
func serviceName(xr string) string {
	if n := childName(xr, "-proxy"); len(validation.IsDNS1035Label(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(xr))
	return "p" + hex.EncodeToString(sum[:])[:12] + "-proxy"
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
func SeedVolume(p Proxy, n Names, ns, hostname, userData string) *v1alpha1.SeedVolume {
	sv := &v1alpha1.SeedVolume{}
	sv.SetGroupVersionKind(v1alpha1.SeedVolumeGroupVersionKind)
	sv.SetName(n.Seed)
	sv.SetNamespace(ns)
	sv.Spec.ProviderConfigReference = providerConfigRef(p)
	sv.Spec.ForProvider.Hostname = hostname
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
	fp.Network, fp.Bridge = p.Network, p.Bridge
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

// Endpoint is where applications reach a proxy: its Service's cluster DNS name, and the
// guest's address behind it.
type Endpoint struct {
	Service, Namespace string
	IP                 string
	Port               int32
}

// Host is the Service's cluster DNS name, <service>.<namespace>.svc.
func (e Endpoint) Host() string { return e.Service + "." + e.Namespace + ".svc" }

// URL is http://<service>.<namespace>.svc:<port>.
func (e Endpoint) URL() string {
	return "http://" + e.Host() + ":" + strconv.Itoa(int(e.Port))
}

// Data is the Secret data (and the connection details) of the endpoint.
func (e Endpoint) Data() map[string][]byte {
	return map[string][]byte{
		SecretKeyURL:  []byte(e.URL()),
		SecretKeyHost: []byte(e.Host()),
		SecretKeyIP:   []byte(e.IP),
		SecretKeyPort: []byte(strconv.Itoa(int(e.Port))),
	}
}

// servicePrevPortName names the port a Service keeps, while a new generation listens on
// another port, for the clients that still use the old one (prevPort).
const servicePrevPortName = "http-proxy-prev"

// Service is the proxy's selectorless Service: cluster DNS and a cluster IP in front of the
// guest, whose address the EndpointSlice gives. prevPort, when not 0, is a second port of the
// Service that reaches the same guests' port: while a replacement changes the port, clients
// of the old one keep working until the old generation is gone.
func Service(n Names, ns string, port, prevPort int32) *corev1.Service {
	ports := []corev1.ServicePort{{Name: servicePortName, Protocol: corev1.ProtocolTCP, Port: port,
		TargetPort: intstr.FromInt32(port)}}
	if prevPort != 0 && prevPort != port {
		ports = append(ports, corev1.ServicePort{Name: servicePrevPortName, Protocol: corev1.ProtocolTCP, Port: prevPort,
			TargetPort: intstr.FromInt32(port)})
	}
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: n.Service, Namespace: ns},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: ports},
	}
}

// Backend is one guest behind the proxy's Service.
type Backend struct {
	IP    string
	Ready bool // the guest passes its readiness probe
}

// EndpointSlice points the proxy's Service at the guests' addresses, all listening on port;
// prevPort as in Service.
func EndpointSlice(n Names, ns string, backends []Backend, port, prevPort int32) *discoveryv1.EndpointSlice {
	return EndpointSliceNamed(n.Service, n, ns, backends, port, prevPort)
}

// EndpointSliceNamed is EndpointSlice under another name: the Service's port names (its port
// and, when otherPort is set, its second one) both reach backends listening on port.
func EndpointSliceNamed(name string, n Names, ns string, backends []Backend, port, otherPort int32) *discoveryv1.EndpointSlice {
	prevPort := otherPort
	eps := make([]discoveryv1.Endpoint, 0, len(backends))
	for _, b := range backends {
		eps = append(eps, discoveryv1.Endpoint{Addresses: []string{b.IP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(b.Ready)}})
	}
	ports := []discoveryv1.EndpointPort{{Name: ptr.To(servicePortName), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}}
	if prevPort != 0 && prevPort != port {
		ports = append(ports, discoveryv1.EndpointPort{Name: ptr.To(servicePrevPortName), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)})
	}
	return &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: n.Service,
			discoveryv1.LabelManagedBy:   ManagedBy,
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       ports,
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
