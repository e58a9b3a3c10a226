// Package scalegen generates kube-proxy-shaped clusters of N Services × E
// endpoints for benchmarks: the v1 Services and EndpointSlices, and replacement
// slices for incremental benchmarks. Package scaleworld feeds them into
// trackers and builds their Rulesets.
//
// It is pure and deterministic: the same Spec gives equal objects, with no
// randomness, clock or I/O. Each object is made on demand from its index, so
// a benchmark can feed a tracker without holding all objects at once.
//
// # Shape
//
// Service i is ns<i/100>/svc<i> (zero-padded, so that the index order is the
// name order, and Service N−1 comes last in every rendered list) with one
// port. By i mod 100:
//
//	0–9    UDP ClusterIP, port 53 → 5353 (DNS-like)
//	10–19  NodePort, TCP 80 → 8080
//	20–21  LoadBalancer, externalTrafficPolicy Local, one ingress IP,
//	       two loadBalancerSourceRanges, a healthCheckNodePort
//	22     LoadBalancer, externalTrafficPolicy Cluster, one ingress IP
//	23     NodePort, externalTrafficPolicy Local
//	24–25  ClusterIP with ClientIP session affinity (timeout 10800 s)
//	26     ClusterIP with one externalIP
//	27     ClusterIP with internalTrafficPolicy Local
//	28–99  ClusterIP, TCP 80 → 8080
//
// so 72% plain TCP ClusterIP, 10% UDP, 14% with a node port, 3% load
// balancers (2% with source ranges), 4% with a Local traffic policy,
// 2% with affinity.
//
// # Addresses
//
// Only the benchmarking ranges: Service i has cluster IP
// 198.19.(i/250).(i%250+1) (the address the kernel floors of package bench
// give it too); load-balancer and external IPs are
// 198.19.(128+i/250).(i%250+1). Pods come from 198.18.16.0–198.18.255.255
// (61,440 addresses): endpoint j of Service i is address (i·E+j) mod 61,440
// of that pool, so pods are shared between Services at scale (30,000 × 10
// needs 300,000 endpoints) while the endpoints of one Service stay distinct.
// ChangedSlice takes replacement addresses from 198.18.8.0/21, outside the
// pool.
//
// Spec.IPv6 makes the cluster single-stack IPv6, for counts that 198.19.0.0/16
// cannot address (up to MaxServices6): Service i has cluster IP
// 2001:db8:19::(i+1) and external IP 2001:db8:19::8:0 + (i+1), inside
// ServiceCIDR6; pods come from a pool of the same 61,440 addresses from
// 2001:db8:18:1000::, replacements from 2001:db8:18:800::, all inside the
// pod network ClusterCIDR6; the source ranges are 2001:db8:18:20::/59 and
// 2001:db8:5100::/40. Everything else is as in IPv4.
//
// # Nodes
//
// Endpoints are spread over 100 nodes node-000…node-099 in three zones; the
// rules are built for node-000 (Config), so about 1% of endpoints are local.
// Services with a Local traffic policy have their first endpoint on node-000
// when i mod 200 < 100 (the others have none there, and drop). Endpoint E−1 of
// every fiftieth Service is terminating (serving, not ready).
package scalegen

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/servicemap"
)

// DefaultEndpoints is the number of endpoints per Service when
// Spec.Endpoints is 0.
const DefaultEndpoints = 10

// Nodes is the number of nodes the endpoints are spread over.
const Nodes = 100

// NodeName and NodeZone are the node the rules are built for
// (scaleworld.Config): endpoint 0 of a Local-policy Service sits on it.
const (
	NodeName = "node-000"
	NodeZone = "zone-a"
)

// ClusterCIDR is the pod network of the generated cluster.
var ClusterCIDR = netip.MustParsePrefix("198.18.0.0/16")

// ServiceCIDR holds every cluster, external and load-balancer IP.
var ServiceCIDR = netip.MustParsePrefix("198.19.0.0/16")

// MaxServices is the largest Services count whose addresses stay inside
// ServiceCIDR without overlapping (cluster IPs below 198.19.128.0).
const MaxServices = 128 * 250

// ClusterCIDR6 and ServiceCIDR6 are the pod and Service networks of an
// IPv6 cluster (Spec.IPv6).
var (
	ClusterCIDR6 = netip.MustParsePrefix("2001:db8:18::/48")
	ServiceCIDR6 = netip.MustParsePrefix("2001:db8:19::/108")
)

// MaxServices6 is the largest Services count of an IPv6 cluster: cluster
// IPs in the lower half of ServiceCIDR6, external IPs in the upper.
const MaxServices6 = 1<<19 - 1

const podPoolSize = 240 * 256 // 198.18.16.0 – 198.18.255.255

var (
	podPoolBase      = netip.MustParseAddr("198.18.16.0")
	changedPoolBase  = netip.MustParseAddr("198.18.8.0")
	podPoolBase6     = netip.MustParseAddr("2001:db8:18:1000::")
	changedPoolBase6 = netip.MustParseAddr("2001:db8:18:800::")
	serviceBase6     = ServiceCIDR6.Addr()
)

// Spec describes a generated cluster.
type Spec struct {
	// Services is the number of Services (one port each).
	Services int
	// Endpoints is the number of endpoints per Service; 0 means
	// DefaultEndpoints.
	Endpoints int
	// ProbePods, when set, replaces the first and the last Service by plain
	// TCP ClusterIP Services (port 80) whose endpoints are these addresses,
	// port 8080, on node-000: real pods to measure connection latency
	// through the rules.
	ProbePods []netip.Addr
	// IPv6 makes every address IPv6 (see the package doc), ProbePods too.
	IPv6 bool
}

// Family is the cluster's IP family.
func (s Spec) Family() v1.IPFamily {
	if s.IPv6 {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

// Max is the largest Services count of the Spec's family: MaxServices or
// MaxServices6.
func (s Spec) Max() int {
	if s.IPv6 {
		return MaxServices6
	}
	return MaxServices
}

// ClusterCIDR is the pod network of the Spec's family.
func (s Spec) ClusterCIDR() netip.Prefix {
	if s.IPv6 {
		return ClusterCIDR6
	}
	return ClusterCIDR
}

// ClusterIP is the cluster IP of Service i in the Spec's family.
func (s Spec) ClusterIP(i int) netip.Addr {
	if s.IPv6 {
		return addrPlus(serviceBase6, uint32(i+1))
	}
	return ClusterIP(i)
}

// ExternalIP is the load-balancer or external IP of Service i, if it has
// one, in the Spec's family.
func (s Spec) ExternalIP(i int) netip.Addr {
	if s.IPv6 {
		return addrPlus(serviceBase6, uint32(MaxServices6+1+i+1))
	}
	return ExternalIP(i)
}

func (s Spec) endpoints() int {
	if s.Endpoints <= 0 {
		return DefaultEndpoints
	}
	return s.Endpoints
}

// Total is the number of endpoints, Services × Endpoints.
func (s Spec) Total() int { return s.Services * s.endpoints() }

// Namespace and Name are the namespace and name of Service i.
func Namespace(i int) string { return fmt.Sprintf("ns%03d", i/100) }

// Name is the name of Service i (see Namespace).
func Name(i int) string { return fmt.Sprintf("svc%05d", i) }

// ClusterIP is the cluster IP of Service i.
func ClusterIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 19, byte(i / 250), byte(i%250 + 1)})
}

// ExternalIP is the load-balancer or external IP of Service i, if it has one.
func ExternalIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 19, byte(128 + i/250), byte(i%250 + 1)})
}

// PortName is the servicemap.PortName of Service i's port.
func (s Spec) PortName(i int) servicemap.PortName {
	k := s.kind(i)
	return servicemap.PortName{Namespace: Namespace(i), Name: Name(i), Port: k.portName(), Protocol: k.protocol()}
}

// Frontend is the cluster IP, port and protocol of Service i.
func (s Spec) Frontend(i int) (netip.AddrPort, v1.Protocol) {
	k := s.kind(i)
	return netip.AddrPortFrom(s.ClusterIP(i), uint16(k.port())), k.protocol()
}

type kind uint8

const (
	plain kind = iota
	udp
	nodePort
	lbLocal
	lbCluster
	nodePortLocal
	affinityIP
	externalIP
	internalLocal
	probe
)

func (s Spec) kind(i int) kind {
	if len(s.ProbePods) > 0 && (i == 0 || i == s.Services-1) {
		return probe
	}
	switch m := i % 100; {
	case m < 10:
		return udp
	case m < 20:
		return nodePort
	case m < 22:
		return lbLocal
	case m == 22:
		return lbCluster
	case m == 23:
		return nodePortLocal
	case m < 26:
		return affinityIP
	case m == 26:
		return externalIP
	case m == 27:
		return internalLocal
	}
	return plain
}

func (k kind) protocol() v1.Protocol {
	if k == udp {
		return v1.ProtocolUDP
	}
	return v1.ProtocolTCP
}

func (k kind) portName() string {
	if k == udp {
		return "dns"
	}
	return "http"
}

func (k kind) port() int32 {
	if k == udp {
		return 53
	}
	return 80
}

func (k kind) targetPort() int32 {
	if k == udp {
		return 5353
	}
	return 8080
}

func (k kind) local() bool { return k == lbLocal || k == nodePortLocal || k == internalLocal }

// nodePortOf numbers the Services with a node port (i mod 100 in 10–23)
// from 30000: at most 14 per hundred Services.
func nodePortOf(i int) int32 { return int32(30000 + (i/100)*14 + i%100 - 10) }

// Service returns Service i.
func (s Spec) Service(i int) *v1.Service {
	k := s.kind(i)
	ip := s.ClusterIP(i).String()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace(i), Name: Name(i)},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  ip,
			ClusterIPs: []string{ip},
			IPFamilies: []v1.IPFamily{s.Family()},
			Ports: []v1.ServicePort{{
				Name:     k.portName(),
				Port:     k.port(),
				Protocol: k.protocol(),
			}},
			SessionAffinity: v1.ServiceAffinityNone,
		},
	}
	spec := &svc.Spec
	switch k {
	case nodePort, nodePortLocal:
		spec.Type = v1.ServiceTypeNodePort
		spec.Ports[0].NodePort = nodePortOf(i)
	case lbLocal, lbCluster:
		spec.Type = v1.ServiceTypeLoadBalancer
		spec.Ports[0].NodePort = nodePortOf(i)
		svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: s.ExternalIP(i).String()}}
		if k == lbLocal {
			spec.LoadBalancerSourceRanges = []string{"198.18.32.0/19", "198.51.100.0/24"}
			if s.IPv6 {
				spec.LoadBalancerSourceRanges = []string{"2001:db8:18:20::/59", "2001:db8:5100::/40"}
			}
			spec.HealthCheckNodePort = int32(40000 + (i/100)*2 + i%100 - 20)
		}
	case affinityIP:
		timeout := int32(10800)
		spec.SessionAffinity = v1.ServiceAffinityClientIP
		spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &timeout}}
	case externalIP:
		spec.ExternalIPs = []string{s.ExternalIP(i).String()}
	case internalLocal:
		p := v1.ServiceInternalTrafficPolicyLocal
		spec.InternalTrafficPolicy = &p
	}
	if k == lbLocal || k == nodePortLocal {
		spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	} else if spec.Type != v1.ServiceTypeClusterIP {
		spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
	}
	return svc
}

func (s Spec) podAddr(n int) netip.Addr {
	if s.IPv6 {
		return addrPlus(podPoolBase6, uint32(n%podPoolSize))
	}
	return addrPlus(podPoolBase, uint32(n%podPoolSize))
}

func (s Spec) changedAddr(version int) netip.Addr {
	if s.IPv6 {
		return addrPlus(changedPoolBase6, uint32(version%2048))
	}
	return addrPlus(changedPoolBase, uint32(version%2048))
}

// addrPlus is a + n, n added to the address's last 32 bits (no carry
// beyond them: the callers stay inside their ranges).
func addrPlus(a netip.Addr, n uint32) netip.Addr {
	b := a.AsSlice()
	tail := b[len(b)-4:]
	v := uint32(tail[0])<<24 | uint32(tail[1])<<16 | uint32(tail[2])<<8 | uint32(tail[3])
	v += n
	tail[0], tail[1], tail[2], tail[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	r, _ := netip.AddrFromSlice(b)
	return r
}

func nodeName(n int) string { return fmt.Sprintf("node-%03d", n) }

func zoneOf(node int) string { return string(rune('a' + node%3)) }

// Slice returns the EndpointSlice of Service i, named "<name>-abcde".
func (s Spec) Slice(i int) *discovery.EndpointSlice { return s.ChangedSlice(i, 0) }

// ChangedSlice returns Service i's EndpointSlice in its version-th revision:
// version 0 is Slice(i); any other version has its last endpoint replaced by
// an address that depends on version (198.18.8.0/21, modulo 2,048), as one step
// of a rolling update. Alternating versions 1 and 2 changes the Service's
// endpoints each time.
func (s Spec) ChangedSlice(i, version int) *discovery.EndpointSlice {
	k := s.kind(i)
	e := s.endpoints()
	var list []discovery.Endpoint
	if k == probe {
		e = len(s.ProbePods)
	}
	list = make([]discovery.Endpoint, 0, e)
	for j := range e {
		var addr netip.Addr
		node := (i*e + j) % Nodes
		switch {
		case k == probe:
			addr, node = s.ProbePods[j], 0
		case version != 0 && j == e-1:
			addr = s.changedAddr(version)
		default:
			addr = s.podAddr(i*e + j)
		}
		if k.local() && j == 0 {
			if i%200 < 100 {
				node = 0
			} else if node == 0 {
				node = 1
			}
		}
		terminating := k != probe && i%50 == 49 && j == e-1
		ready, serving := !terminating, true
		nn, zone := nodeName(node), "zone-"+zoneOf(node)
		list = append(list, discovery.Endpoint{
			Addresses:  []string{addr.String()},
			Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			NodeName:   &nn,
			Zone:       &zone,
		})
	}
	portName, port, proto := k.portName(), k.targetPort(), k.protocol()
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: Namespace(i),
			Name:      Name(i) + "-abcde",
			Labels:    map[string]string{discovery.LabelServiceName: Name(i)},
		},
		AddressType: discovery.AddressType(s.Family()),
		Endpoints:   list,
		Ports:       []discovery.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
	}
}

// Objects returns every Service and EndpointSlice, by index.
func (s Spec) Objects() ([]*v1.Service, []*discovery.EndpointSlice) {
	svcs := make([]*v1.Service, s.Services)
	slices := make([]*discovery.EndpointSlice, s.Services)
	for i := range s.Services {
		svcs[i], slices[i] = s.Service(i), s.Slice(i)
	}
	return svcs, slices
}
