package ruleset_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/affinity"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// cmpOpts compares the net/netip and affinity values inside Services by value.
var cmpOpts = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
	cmp.Comparer(func(a, b affinity.Policy) bool { return a == b }),
}

func ptr[T any](v T) *T { return &v }

// thisNode is the node the rules are built for in the table tests.
var thisNode = topology.Node{Name: "node-a", Zone: "z1"}

func v4Config(mods ...func(*ruleset.Config)) ruleset.Config {
	cfg := ruleset.Config{Family: v1.IPv4Protocol, Node: thisNode}
	for _, m := range mods {
		m(&cfg)
	}
	return cfg
}

// webPort is the PortName of the Services that service() makes.
func webPort(ns, name string) servicemap.PortName {
	return servicemap.PortName{Namespace: ns, Name: name, Port: "http", Protocol: v1.ProtocolTCP}
}

// service is a ClusterIP Service ns/name with cluster IP ip and one TCP port
// "http" 80, changed by mods.
func service(ns, name, ip string, mods ...func(*v1.Service)) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  ip,
			ClusterIPs: []string{ip},
			Ports:      []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func nodePort(s *v1.Service) {
	s.Spec.Type = v1.ServiceTypeNodePort
	s.Spec.Ports[0].NodePort = 30080
}

func loadBalancer(ips ...string) func(*v1.Service) {
	return func(s *v1.Service) {
		nodePort(s)
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
	}
}

func externalIPs(ips ...string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
}

func sourceRanges(cidrs ...string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = cidrs }
}

func eTPLocal(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal }

func iTPLocal(s *v1.Service) {
	s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
}

func trafficDistribution(td string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.TrafficDistribution = &td }
}

// ep describes one endpoint of a slice.
type ep struct {
	ip, node, zone string
	// state is "ready" (the zero value), "terminating" (serving and
	// terminating), "gone" (terminating, not serving) or "unready".
	state     string
	zoneHints []string
}

func (e ep) endpoint() discovery.Endpoint {
	out := discovery.Endpoint{Addresses: []string{e.ip}}
	if e.node != "" {
		out.NodeName = ptr(e.node)
	}
	if e.zone != "" {
		out.Zone = ptr(e.zone)
	}
	switch e.state {
	case "", "ready":
		out.Conditions = discovery.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}
	case "terminating":
		out.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	case "gone":
		out.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
	case "unready":
		out.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(false)}
	default:
		panic("unknown endpoint state " + e.state)
	}
	if e.zoneHints != nil {
		out.Hints = &discovery.EndpointHints{}
		for _, z := range e.zoneHints {
			out.Hints.ForZones = append(out.Hints.ForZones, discovery.ForZone{Name: z})
		}
	}
	return out
}

// endpointSlice is an EndpointSlice called name of the Service ns/svc, with
// port "http" 8080 and the given endpoints. Its address type follows the
// first endpoint's address (IPv4 when there is none).
func endpointSlice(ns, svc, name string, eps ...ep) *discovery.EndpointSlice {
	es := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{discovery.LabelServiceName: svc},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(v1.ProtocolTCP)}},
	}
	for _, e := range eps {
		es.Endpoints = append(es.Endpoints, e.endpoint())
	}
	if len(eps) > 0 && netip.MustParseAddr(eps[0].ip).Is6() {
		es.AddressType = discovery.AddressTypeIPv6
	}
	return es
}

// snapshots feeds svcs and slices into fresh trackers of family and returns
// their snapshots. The fixtures must be valid: any tracker warning, or any
// object the tracker skips, fails the test.
func snapshots(t testing.TB, family v1.IPFamily, svcs []*v1.Service, eslices []*discovery.EndpointSlice) (servicemap.Snapshot, endpoints.Snapshot) {
	t.Helper()
	st := servicemap.NewTracker(family, servicemap.Filter{})
	for _, s := range svcs {
		if skipped, w := st.Update(s); skipped != "" || len(w) > 0 {
			t.Fatalf("fixture Service %s/%s: skipped %q, warnings %v", s.Namespace, s.Name, skipped, w)
		}
	}
	et := endpoints.NewTracker(family, servicemap.Filter{})
	for _, es := range eslices {
		if skipped, w := et.Update(es); skipped != "" || len(w) > 0 {
			t.Fatalf("fixture EndpointSlice %s/%s: skipped %q, warnings %v", es.Namespace, es.Name, skipped, w)
		}
	}
	ss, _ := st.Snapshot()
	es, _ := et.Snapshot()
	return ss, es
}

// build builds the Ruleset of cfg for svcs and slices; any warning of the
// Builder fails the test.
func build(t testing.TB, cfg ruleset.Config, svcs []*v1.Service, eslices []*discovery.EndpointSlice) *ruleset.Ruleset {
	t.Helper()
	rs, warnings := buildWarned(t, cfg, svcs, eslices)
	if len(warnings) > 0 {
		t.Fatalf("Build warnings: %v", warnings)
	}
	return rs
}

// buildWarned builds the Ruleset of cfg for svcs and slices, and returns the
// Builder's warnings for the test to check.
func buildWarned(t testing.TB, cfg ruleset.Config, svcs []*v1.Service, eslices []*discovery.EndpointSlice) (*ruleset.Ruleset, []svcproxy.Warning) {
	t.Helper()
	b, err := ruleset.NewBuilder(cfg)
	if err != nil {
		t.Fatalf("NewBuilder: %v", err)
	}
	ss, es := snapshots(t, cfg.Family, svcs, eslices)
	return b.Build(ss, es)
}

// summary is the part of a Service that the route table tests check, in a
// form that reads well in a diff.
type summary struct {
	Internal, External string
	// Cluster and Local are the targets as "ip:port r<N−i>[ local]", for
	// target i of N: a walk of the list picks it with probability 1/(N−i).
	Cluster, Local []string
	// Endpoints are the Service's Endpoints as "ip:port".
	Endpoints []string
	// ExternalIPs and ExternalPolicyLocal are the Service's (possibly
	// restricted) values.
	ExternalIPs         []string
	ExternalPolicyLocal bool
}

func targetStrings(ts []ruleset.Target) []string {
	var out []string
	for i, t := range ts {
		s := fmt.Sprintf("%s r%d", t.Endpoint, len(ts)-i)
		if t.Local {
			s += " local"
		}
		out = append(out, s)
	}
	return out
}

func summarize(s *ruleset.Service) summary {
	sum := summary{
		Internal:            s.Internal.String(),
		External:            s.External.String(),
		Cluster:             targetStrings(s.ClusterTargets),
		Local:               targetStrings(s.LocalTargets),
		ExternalPolicyLocal: s.ExternalPolicyLocal,
	}
	for _, e := range s.Endpoints {
		sum.Endpoints = append(sum.Endpoints, e.String())
	}
	for _, ip := range s.ExternalIPs {
		sum.ExternalIPs = append(sum.ExternalIPs, ip.String())
	}
	return sum
}
