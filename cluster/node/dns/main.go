// Command dns is the node's cluster DNS (cluster/node): the part of CoreDNS's kubernetes plugin
// that the node's pods need, and nothing else. It answers A queries for Service names,
// <service>.<namespace>.svc.<domain>, with the Service's ClusterIP, or for a headless Service
// (Crossplane's Function Services are headless: the core balances over the pods itself) with
// the addresses of its ready endpoints. Every other name in the domain is NXDOMAIN; names
// outside it too (the test bed has no upstream DNS). It watches Services and EndpointSlices
// through the API server with the given kubeconfig and listens on UDP in netns node, where
// the pods reach it at their gateway (the kubelet's clusterDNS).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	listersdiscoveryv1 "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// ttl is how long a pod's resolver may keep an answer: short, as endpoints change when pods
// are replaced.
const ttl = 5

func main() {
	listen := flag.String("listen", "0.0.0.0:53", "UDP address to answer on")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server to watch")
	domain := flag.String("domain", "cluster.local", "the cluster domain")
	flag.Parse()
	if err := run(*listen, *kubeconfig, *domain); err != nil {
		log.Fatal(err)
	}
}

func run(listen, kubeconfig, domain string) error {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	f := informers.NewSharedInformerFactory(cs, 10*time.Minute)
	svcs := f.Core().V1().Services()
	slices := f.Discovery().V1().EndpointSlices()
	svcInf, sliceInf := svcs.Informer(), slices.Informer()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), svcInf.HasSynced, sliceInf.HasSynced) {
		return fmt.Errorf("the Service and EndpointSlice caches did not sync")
	}
	pc, err := (&net.ListenConfig{}).ListenPacket(ctx, "udp", listen)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); _ = pc.Close() }()
	log.Printf("answering for *.svc.%s on udp %s", domain, listen)
	z := &zone{domain: domain, lookup: listerLookup(svcs.Lister(), slices.Lister())}
	buf := make([]byte, 1500)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		out, err := z.reply(buf[:n])
		if err != nil {
			log.Printf("%s: %v", addr, err)
			continue
		}
		if _, err := pc.WriteTo(out, addr); err != nil {
			log.Printf("%s: %v", addr, err)
		}
	}
}

// lookupFunc returns the IPv4 addresses of Service ns/name, and whether the Service exists.
type lookupFunc func(ns, name string) ([]netip.Addr, bool)

// listerLookup answers from the informers' caches.
func listerLookup(svcs listersv1.ServiceLister, slices listersdiscoveryv1.EndpointSliceLister) lookupFunc {
	return func(ns, name string) ([]netip.Addr, bool) {
		svc, err := svcs.Services(ns).Get(name)
		if err != nil {
			return nil, false
		}
		if svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			a, err := netip.ParseAddr(svc.Spec.ClusterIP)
			if err != nil || !a.Is4() {
				return nil, true
			}
			return []netip.Addr{a}, true
		}
		l, err := slices.EndpointSlices(ns).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name}))
		if err != nil {
			return nil, true
		}
		return readyAddrs(l), true
	}
}

// readyAddrs are the IPv4 addresses of the ready endpoints of slices, once each.
func readyAddrs(slices []*discoveryv1.EndpointSlice) []netip.Addr {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				ip, err := netip.ParseAddr(a)
				if err == nil && !seen[ip] {
					seen[ip] = true
					out = append(out, ip)
				}
			}
		}
	}
	return out
}

// zone answers queries for the cluster domain.
type zone struct {
	domain string
	lookup lookupFunc
}

// reply builds the answer to the query in msg.
func (z *zone) reply(msg []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil, fmt.Errorf("bad query: %w", err)
	}
	q, err := p.Question()
	if err != nil {
		return nil, fmt.Errorf("bad question: %w", err)
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	addrs, rcode := z.answer(q)
	rh.RCode = rcode
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		rr := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: ttl}
		if err := b.AResource(rr, dnsmessage.AResource{A: a.As4()}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// answer is what z says to q: the addresses for an A query of an existing Service's name (none
// for another type: NODATA), NXDOMAIN for any other name.
func (z *zone) answer(q dnsmessage.Question) ([]netip.Addr, dnsmessage.RCode) {
	ns, name, ok := serviceName(q.Name.String(), z.domain)
	if !ok || q.Class != dnsmessage.ClassINET {
		return nil, dnsmessage.RCodeNameError
	}
	addrs, exists := z.lookup(ns, name)
	if !exists {
		return nil, dnsmessage.RCodeNameError
	}
	if q.Type != dnsmessage.TypeA {
		return nil, dnsmessage.RCodeSuccess
	}
	return addrs, dnsmessage.RCodeSuccess
}

// serviceName splits fqdn, <service>.<namespace>.svc.<domain>. (any case), into its namespace
// and Service name.
func serviceName(fqdn, domain string) (ns, name string, ok bool) {
	labels := splitLabels(lower(fqdn))
	want := append([]string{"svc"}, splitLabels(lower(domain)+".")...)
	if len(labels) != 2+len(want) {
		return "", "", false
	}
	for i, l := range want {
		if labels[2+i] != l {
			return "", "", false
		}
	}
	return labels[1], labels[0], labels[0] != "" && labels[1] != ""
}

// splitLabels splits an absolute name ("a.b.") into its labels.
func splitLabels(fqdn string) []string {
	var out []string
	start := 0
	for i := 0; i < len(fqdn); i++ {
		if fqdn[i] == '.' {
			out = append(out, fqdn[start:i])
			start = i + 1
		}
	}
	if start < len(fqdn) {
		out = append(out, fqdn[start:])
	}
	return out
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
