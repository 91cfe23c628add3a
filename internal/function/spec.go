package function

import (
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"github.com/crossplane/crossplane-runtime/v2/pkg/errors"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults of the Proxy API. The XRDs default the same fields; the function applies them
// again so that it behaves the same when the API server did not (crossplane render without
// --xrd, an XR written before a default was added). spec.host has no default: a Proxy without
// one is placed (placement.go).
const (
	DefaultVCPU           = 1
	DefaultMemoryMiB      = 512
	DefaultPort           = 3128
	DefaultExpectedStatus = 204
	DefaultReplicas       = 1
)

// DefaultAllowedCIDRs are the RFC 1918 networks.
var DefaultAllowedCIDRs = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"}

// Limits shared with the XRDs' OpenAPI schemas and the KVMDomain API.
const (
	maxVCPU           = 256
	maxSelectorLabels = 32
	minMemoryMiB      = 128
	maxMemoryMiB      = 4194304
	maxDiskSizeGiB    = 65536
	maxDirectiveLen   = 1024
	maxDirectives     = 100
	maxSSHKeyLen      = 8192
	maxSSHKeys        = 32
	maxCIDRs          = 64
	maxDomains        = 256
	maxURLLen         = 2048
	minExpectedCode   = 100
	maxExpectedCode   = 599
	sha256HexLen      = 64
	maxPortNumber     = 65535
	maxReplicas       = 16
)

var (
	reSHA256   = regexp.MustCompile(`^[a-f0-9]{64}$`)
	reImageURL = regexp.MustCompile(`^https?://[^\s]+$`)
	reProbeURL = regexp.MustCompile(`^http://[^\s]+$`)
)

// ProxySpec is the spec of a Proxy (v2, namespaced) or of a legacy XProxy (created by a
// ProxyClaim). Integers are pointers so that a missing field (defaulted) and an explicit
// zero (invalid) differ. Unknown fields, among them the ones Crossplane adds (crossplane,
// claimRef, resourceRefs) and any namespace a user might slip in, are ignored.
type ProxySpec struct {
	Host              string            `json:"host,omitempty"`
	HostSelector      map[string]string `json:"hostSelector,omitempty"`
	Image             ImageSpec         `json:"image"`
	VCPU              *int64            `json:"vcpu,omitempty"`
	MemoryMiB         *int64            `json:"memoryMiB,omitempty"`
	DiskSizeGiB       *int64            `json:"diskSizeGiB,omitempty"`
	Port              *int64            `json:"port,omitempty"`
	AllowedCIDRs      []string          `json:"allowedCIDRs,omitempty"`
	AllowedDomains    []string          `json:"allowedDomains,omitempty"`
	SquidDirectives   []string          `json:"squidDirectives,omitempty"`
	SSHAuthorizedKeys []string          `json:"sshAuthorizedKeys,omitempty"`
	Probe             *ProbeSpec        `json:"probe,omitempty"`
	Replicas          *int64            `json:"replicas,omitempty"`
}

// ImageSpec says which image the proxy boots: a shared BaseImage, or a new one to cache.
type ImageSpec struct {
	BaseImageName string `json:"baseImageName,omitempty"`
	URL           string `json:"url,omitempty"`
	SHA256        string `json:"sha256,omitempty"`
}

// ProbeSpec is the readiness probe sent through the proxy.
type ProbeSpec struct {
	URL            string `json:"url"`
	ExpectedStatus *int64 `json:"expectedStatus,omitempty"`
}

// Proxy is a validated, defaulted ProxySpec.
type Proxy struct {
	// Host is spec.host; "" when the Proxy is placed (placement.go), which sets it.
	Host              string
	BaseImageName     string // a shared BaseImage; empty when the proxy caches its own
	ImageURL          string // the image to cache; empty when BaseImageName is set
	ImageSHA256       string
	VCPU              int32
	MemoryMiB         int32
	DiskSizeGiB       *int32
	Port              int32
	AllowedCIDRs      []netip.Prefix
	AllowedDomains    []string // squid dstdomain entries; empty: any domain
	SquidDirectives   []string
	SSHAuthorizedKeys []string
	ProbeURL          string // empty: probe the port with TCP
	ProbeStatus       int32
	Destinations      Destinations // the platform's destination rules (Rules.Apply)
	AptSources        string       // the platform's apt sources for packages the image lacks (Rules.Apply); "": the image's
	// Network and Bridge are the VM's attachment, the platform's default attachment (at most
	// one is set); both empty: the host config's default.
	Network, Bridge string
	// Replicas is how many VMs serve the Proxy (spec.replicas), each on its own host when
	// placement can (replicas.go).
	Replicas int32
}

// Validate checks a ProxySpec and returns it defaulted. It reports every problem at once,
// each naming the spec field, so a user can fix them in one go.
func (s ProxySpec) Validate() (Proxy, error) { //nolint:gocyclo // a flat list of independent field checks that collects every message; splitting it would scatter the API rules
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, errors.Errorf("spec.%s: %s", field, fmt.Sprintf(format, a...)))
	}
	p := Proxy{Host: s.Host}

	if p.Host != "" {
		for _, m := range validation.IsDNS1123Subdomain(p.Host) {
			bad("host", "%q is not a valid ClusterProviderConfig name: %s", p.Host, m)
		}
		if len(s.HostSelector) > 0 {
			bad("hostSelector", "set either host (a given host) or hostSelector (placed among the hosts with these labels), not both")
		}
	}
	if len(s.HostSelector) > maxSelectorLabels {
		bad("hostSelector", "must list at most %d labels, got %d", maxSelectorLabels, len(s.HostSelector))
	}
	for _, k := range sortedKeys(s.HostSelector) {
		for _, m := range validation.IsQualifiedName(k) {
			bad("hostSelector", "%q is not a valid label key: %s", k, m)
		}
		for _, m := range validation.IsValidLabelValue(s.HostSelector[k]) {
			bad("hostSelector."+k, "%q is not a valid label value: %s", s.HostSelector[k], m)
		}
	}

	img := s.Image
	switch {
	case img.BaseImageName != "" && (img.URL != "" || img.SHA256 != ""):
		bad("image", "set either baseImageName (share an existing BaseImage) or url and sha256 (cache a new one), not both")
	case img.BaseImageName != "":
		for _, m := range validation.IsDNS1123Subdomain(img.BaseImageName) {
			bad("image.baseImageName", "%q is not a valid BaseImage name: %s", img.BaseImageName, m)
		}
		p.BaseImageName = img.BaseImageName
	case img.URL == "" && img.SHA256 == "":
		bad("image", "set either baseImageName (share an existing BaseImage) or url and sha256 (cache a new one)")
	default:
		if len(img.URL) > maxURLLen || !reImageURL.MatchString(img.URL) {
			bad("image.url", "%q is not an http or https URL", shownURL(img.URL))
		}
		if !reSHA256.MatchString(img.SHA256) {
			bad("image.sha256", "must be %d lower-case hex characters, got %q", sha256HexLen, img.SHA256)
		}
		p.ImageURL, p.ImageSHA256 = img.URL, img.SHA256
	}

	p.VCPU = int32(intOr(s.VCPU, DefaultVCPU))
	if v := intOr(s.VCPU, DefaultVCPU); v < 1 || v > maxVCPU {
		bad("vcpu", "must be between 1 and %d, got %d", maxVCPU, v)
	}
	p.MemoryMiB = int32(intOr(s.MemoryMiB, DefaultMemoryMiB))
	if v := intOr(s.MemoryMiB, DefaultMemoryMiB); v < minMemoryMiB || v > maxMemoryMiB {
		bad("memoryMiB", "must be between %d and %d, got %d", minMemoryMiB, maxMemoryMiB, v)
	}
	if s.DiskSizeGiB != nil {
		if v := *s.DiskSizeGiB; v < 1 || v > maxDiskSizeGiB {
			bad("diskSizeGiB", "must be between 1 and %d, got %d", maxDiskSizeGiB, v)
		} else {
			d := int32(v)
			p.DiskSizeGiB = &d
		}
	}
	p.Replicas = int32(intOr(s.Replicas, DefaultReplicas))
	if v := intOr(s.Replicas, DefaultReplicas); v < 1 || v > maxReplicas {
		bad("replicas", "must be between 1 and %d, got %d", maxReplicas, v)
	}
	p.Port = int32(intOr(s.Port, DefaultPort))
	if v := intOr(s.Port, DefaultPort); v < 1 || v > maxPortNumber {
		bad("port", "must be between 1 and %d, got %d", maxPortNumber, v)
	}

	cidrs := s.AllowedCIDRs
	if cidrs == nil {
		cidrs = DefaultAllowedCIDRs
	}
	switch {
	case len(cidrs) == 0:
		bad("allowedCIDRs", "must list at least one network; nobody could use the proxy")
	case len(cidrs) > maxCIDRs:
		bad("allowedCIDRs", "must list at most %d networks, got %d", maxCIDRs, len(cidrs))
	}
	for i, c := range cidrs {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			bad(fmt.Sprintf("allowedCIDRs[%d]", i), "%q is not a CIDR such as 10.0.0.0/8", c)
			continue
		}
		p.AllowedCIDRs = append(p.AllowedCIDRs, pfx.Masked())
	}

	if s.AllowedDomains != nil && len(s.AllowedDomains) == 0 {
		bad("allowedDomains", "must list at least one domain; leave it out for the platform's default")
	}
	if len(s.AllowedDomains) > maxDomains {
		bad("allowedDomains", "must list at most %d domains, got %d", maxDomains, len(s.AllowedDomains))
	}
	for i, d := range s.AllowedDomains {
		if m := checkDomain(d); m != "" {
			bad(fmt.Sprintf("allowedDomains[%d]", i), "%s", m)
		}
	}
	if s.AllowedDomains != nil {
		p.AllowedDomains = squidDomains(s.AllowedDomains)
	}

	if len(s.SquidDirectives) > maxDirectives {
		bad("squidDirectives", "must list at most %d directives, got %d", maxDirectives, len(s.SquidDirectives))
	}
	for i, d := range s.SquidDirectives {
		if err := singleLine(d, maxDirectiveLen); err != nil {
			bad(fmt.Sprintf("squidDirectives[%d]", i), "%v", err)
		}
	}
	p.SquidDirectives = s.SquidDirectives

	if len(s.SSHAuthorizedKeys) > maxSSHKeys {
		bad("sshAuthorizedKeys", "must list at most %d keys, got %d", maxSSHKeys, len(s.SSHAuthorizedKeys))
	}
	for i, k := range s.SSHAuthorizedKeys {
		// A key's value is never repeated: the message becomes a condition and an event, and
		// a pasted private key must not be copied into them.
		field := fmt.Sprintf("sshAuthorizedKeys[%d]", i)
		switch {
		case privateKey(k):
			bad(field, "is a private key, which is refused (its value is not repeated here): paste the public key (the .pub file) instead, and treat this private key as exposed, since it was written into this Proxy's spec")
		case singleLine(k, maxSSHKeyLen) != nil:
			bad(field, "must be a single line of at most %d characters without control characters (its value is not repeated here)", maxSSHKeyLen)
		case strings.TrimSpace(k) == "":
			bad(field, "must not be empty")
		}
	}
	p.SSHAuthorizedKeys = s.SSHAuthorizedKeys

	if s.Probe != nil {
		if len(s.Probe.URL) > maxURLLen || !reProbeURL.MatchString(s.Probe.URL) {
			bad("probe.url", "%q is not an http:// URL (the probe fetches it through the proxy)", shownURL(s.Probe.URL))
		}
		st := intOr(s.Probe.ExpectedStatus, DefaultExpectedStatus)
		if st < minExpectedCode || st > maxExpectedCode {
			bad("probe.expectedStatus", "must be an HTTP status between %d and %d, got %d", minExpectedCode, maxExpectedCode, st)
		}
		p.ProbeURL, p.ProbeStatus = s.Probe.URL, int32(st)
	}

	if len(errs) > 0 {
		// One line: the message becomes an event and a condition message on the XR.
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return Proxy{}, errors.New(strings.Join(msgs, "; "))
	}
	return p, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func intOr(v *int64, def int64) int64 {
	if v == nil {
		return def
	}
	return *v
}

// singleLine accepts one line of printable text: no line breaks or other control
// characters (a tab is fine), at most max bytes.
// shownURL is raw as messages show it: without user info, query or fragment (a pre-signed
// URL carries its token in the query).
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		s, _, _ := strings.Cut(raw, "?")
		return s
	}
	u.User, u.RawQuery, u.Fragment, u.RawFragment = nil, "", "", ""
	return u.String()
}

// privateKey is true when s looks like a private key rather than an authorized_keys line: a
// PEM or OpenSSH private key block (or any PEM block), a PuTTY key file, or the base64 body of
// an OpenSSH private key pasted without its armour.
func privateKey(s string) bool {
	t := strings.TrimSpace(s)
	return strings.Contains(t, "PRIVATE KEY") || strings.Contains(t, "-----BEGIN ") ||
		strings.Contains(t, "PuTTY-User-Key-File") || strings.HasPrefix(t, "b3BlbnNzaC1rZXktdjE")
}

func singleLine(s string, maxLen int) error {
	if len(s) > maxLen {
		return errors.Errorf("must be at most %d characters, got %d", maxLen, len(s))
	}
	for _, r := range s {
		if r == '\n' || r == '\r' {
			return errors.Errorf("must be a single line: %q contains a line break", s)
		}
		if r != '\t' && (unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || r == '\u0085') {
			return errors.Errorf("must not contain control characters: %q", s)
		}
	}
	return nil
}
