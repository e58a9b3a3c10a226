// Package nfttest is the test kit of both nftables layouts (nftables and
// nftables/flat): a world of Services and EndpointSlices fed through the
// trackers as a proxy does, builders of the objects, and a knftables Fake
// checked as strictly as the kernel. Each package's tests use it under
// short names of their own (helpers_test.go).
package nfttest

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// Fataler is what *testing.T and *rapid.T have in common.
type Fataler interface {
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// Helper marks the calling function as a test helper when tb can.
func Helper(tb Fataler) {
	if h, ok := tb.(interface{ Helper() }); ok {
		h.Helper()
	}
}

// World feeds Services and EndpointSlices through the trackers and builds
// Rulesets, as a proxy does. It fails the test on any object the trackers
// skip or warn about and on any Build or Update warning, so that a typo in a
// fixture cannot make an empty Ruleset.
type World struct {
	// tb receives the failures: a test that uses a world another test made
	// sets it to its own.
	TB      Fataler
	Svcs    *servicemap.Tracker
	Eps     *endpoints.Tracker
	Builder *ruleset.Builder
}

func NewWorld(tb Fataler, cfg ruleset.Config) *World {
	Helper(tb)
	b, err := ruleset.NewBuilder(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return &World{
		TB:      tb,
		Svcs:    servicemap.NewTracker(cfg.Family, servicemap.Filter{}),
		Eps:     endpoints.NewTracker(cfg.Family, servicemap.Filter{}),
		Builder: b,
	}
}

// Add feeds Services and EndpointSlices to the trackers.
func (w *World) Add(objs ...any) {
	Helper(w.TB)
	for _, o := range objs {
		var skipped string
		var warnings []svcproxy.Warning
		switch o := o.(type) {
		case *v1.Service:
			skipped, warnings = w.Svcs.Update(o)
		case *discovery.EndpointSlice:
			skipped, warnings = w.Eps.Update(o)
		default:
			w.TB.Fatalf("world.add: unexpected %T", o)
		}
		if skipped != "" || len(warnings) > 0 {
			w.TB.Fatalf("world.add %s: skipped %q, warnings %v", objectName(o), skipped, warnings)
		}
	}
}

// objectName is "Kind namespace/name" of a Service or EndpointSlice.
func objectName(o any) string {
	switch o := o.(type) {
	case *v1.Service:
		return "Service " + o.Namespace + "/" + o.Name
	case *discovery.EndpointSlice:
		return "EndpointSlice " + o.Namespace + "/" + o.Name
	}
	return fmt.Sprintf("%T", o)
}

// Build makes the Ruleset of the trackers' state with Builder.Build.
func (w *World) Build() *ruleset.Ruleset {
	Helper(w.TB)
	s, _ := w.Svcs.Snapshot()
	e, _ := w.Eps.Snapshot()
	rs, warnings := w.Builder.Build(s, e)
	w.CheckWarnings("Build", warnings)
	return rs
}

// Update makes the Ruleset of the trackers' state with Builder.Update, as a
// proxy does: prev must be the Ruleset of the trackers' previous snapshots
// (build's or update's), or nil.
func (w *World) Update(prev *ruleset.Ruleset) *ruleset.Ruleset {
	Helper(w.TB)
	s, _ := w.Svcs.Snapshot()
	e, _ := w.Eps.Snapshot()
	rs, _, warnings := w.Builder.Update(prev, s, e)
	w.CheckWarnings("Update", warnings)
	return rs
}

// CheckWarnings fails the test on any of warnings, of what.
func (w *World) CheckWarnings(what string, warnings []svcproxy.Warning) {
	Helper(w.TB)
	if len(warnings) > 0 {
		w.TB.Fatalf("%s warnings: %v", what, warnings)
	}
}

// The node the rules are for, and the addresses of the tests: pods in
// 198.18.64.0/18 (2001:db8:18:40::/58), Services in 198.19.0.0/16
// (2001:db8:19::/108), nodes in 198.18.0.0/24.
const Node = "node-a"

// Config4 is the IPv4 Config of the tests.
func Config4() ruleset.Config {
	return ruleset.Config{
		Family:       v1.IPv4Protocol,
		Node:         topology.Node{Name: Node, Zone: "zone-1"},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/18")},
	}
}

// Config6 is the IPv6 Config of the tests.
func Config6() ruleset.Config {
	return ruleset.Config{
		Family:       v1.IPv6Protocol,
		Node:         topology.Node{Name: Node, Zone: "zone-1"},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("2001:db8:18:40::/58")},
	}
}

// Svc is a ClusterIP Service ns/name with one TCP port "p80" (80 → 8080).
func Svc(ns, name, clusterIP string, mods ...func(*v1.Service)) *v1.Service {
	family := v1.IPv4Protocol
	if strings.Contains(clusterIP, ":") {
		family = v1.IPv6Protocol
	}
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			IPFamilies: []v1.IPFamily{family},
			Ports:      []v1.ServicePort{{Name: "p80", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

// NodePort makes a Service a NodePort one (unless it is a LoadBalancer) on port.
func NodePort(port int32) func(*v1.Service) {
	return func(s *v1.Service) {
		if s.Spec.Type == v1.ServiceTypeClusterIP {
			s.Spec.Type = v1.ServiceTypeNodePort
		}
		s.Spec.Ports[0].NodePort = port
	}
}

// LoadBalancer makes a Service a LoadBalancer with ingress ips.
func LoadBalancer(ips ...string) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
	}
}

// SourceRanges sets a Service's loadBalancerSourceRanges.
func SourceRanges(cidrs ...string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = cidrs }
}

// ExternalIPs sets a Service's externalIPs.
func ExternalIPs(ips ...string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
}

// ExternalLocal sets externalTrafficPolicy Local.
func ExternalLocal(s *v1.Service) {
	s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
}

// InternalLocal sets internalTrafficPolicy Local.
func InternalLocal(s *v1.Service) {
	p := v1.ServiceInternalTrafficPolicyLocal
	s.Spec.InternalTrafficPolicy = &p
}

// Affinity sets ClientIP session affinity with a timeout of seconds.
func Affinity(seconds int32) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &seconds}}
	}
}

// UDP makes a Service's port UDP.
func UDP(s *v1.Service) { s.Spec.Ports[0].Protocol = v1.ProtocolUDP }

// EP is one endpoint of a slice.
type EP struct {
	IP   string
	Node string
	// NotReady, Terminating: the conditions (ready and serving otherwise).
	NotReady, Terminating bool
}

// Slice is the EndpointSlice ns/name-1 of Service ns/name with port "p80"
// (TCP, or proto) on targetPort.
func Slice(ns, name string, targetPort int32, eps ...EP) *discovery.EndpointSlice {
	return SliceProto(ns, name, v1.ProtocolTCP, targetPort, eps...)
}

// SliceProto is Slice with port protocol proto.
func SliceProto(ns, name string, proto v1.Protocol, targetPort int32, eps ...EP) *discovery.EndpointSlice {
	addrType := discovery.AddressTypeIPv4
	var list []discovery.Endpoint
	for _, e := range eps {
		if strings.Contains(e.IP, ":") {
			addrType = discovery.AddressTypeIPv6
		}
		ready, serving, terminating := !e.NotReady && !e.Terminating, !e.NotReady, e.Terminating
		d := discovery.Endpoint{
			Addresses:  []string{e.IP},
			Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		}
		if e.Node != "" {
			n := e.Node
			d.NodeName = &n
		}
		list = append(list, d)
	}
	portName := "p80"
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name + "-1",
			Labels: map[string]string{discovery.LabelServiceName: name},
		},
		AddressType: addrType,
		Endpoints:   list,
		Ports:       []discovery.EndpointPort{{Name: &portName, Port: &targetPort, Protocol: &proto}},
	}
}

// Apply runs tx on the fake and fails the test on error, after checking
// that the kernel would accept what the fake accepts (see strictCheck).
func Apply(tb Fataler, fake *knftables.Fake, tx *knftables.Transaction) {
	Helper(tb)
	if err := strictCheck(fake, tx); err != nil {
		tb.Fatalf("transaction the kernel would refuse: %v\n%s", err, tx)
	}
	if err := fake.Run(context.Background(), tx); err != nil {
		tb.Fatalf("fake.Run: %v\n%s", err, tx)
	}
	if err := DanglingRefs(fake); err != nil {
		tb.Fatalf("after the transaction: %v\n%s", err, tx)
	}
}

// strictCheck catches what knftables' Fake allows and the kernel does not:
// adding a map or set element whose key is already there with another value
// or comment (the kernel answers EEXIST, or silently keeps the old comment).
func strictCheck(fake *knftables.Fake, tx *knftables.Transaction) error {
	elems := map[string]string{} // "set key" → whole line
	for _, line := range strings.Split(fake.Dump(), "\n") {
		if k, ok := elementKey(line); ok {
			elems[k] = strings.TrimPrefix(line, "add ")
		}
	}
	for _, line := range strings.Split(tx.String(), "\n") {
		verb, rest, _ := strings.Cut(line, " ")
		switch {
		case strings.HasPrefix(rest, "element "):
			k, _ := elementKey("add " + rest)
			switch verb {
			case "add":
				if old, ok := elems[k]; ok && old != rest {
					return fmt.Errorf("%q while %q exists", line, old)
				}
				elems[k] = rest
			case "delete":
				delete(elems, k)
			}
		case verb == "flush" && (strings.HasPrefix(rest, "map ") || strings.HasPrefix(rest, "set ")):
			f := strings.Fields(rest) // map ip kube-proxy NAME
			for k := range elems {
				if strings.HasPrefix(k, f[3]+" ") {
					delete(elems, k)
				}
			}
		case verb == "delete" && (strings.HasPrefix(rest, "map ") || strings.HasPrefix(rest, "set ")):
			f := strings.Fields(rest)
			for k := range elems {
				if strings.HasPrefix(k, f[3]+" ") {
					delete(elems, k)
				}
			}
		}
	}
	return nil
}

// elementKey returns "NAME KEY" for an "add element FAMILY TABLE NAME { KEY
// [comment "…"] [: VALUE] }" line.
func elementKey(line string) (string, bool) {
	rest, ok := strings.CutPrefix(line, "add element ")
	if !ok {
		return "", false
	}
	f := strings.SplitN(rest, " ", 4) // family table name "{ …"
	body := strings.TrimSuffix(strings.TrimPrefix(f[3], "{ "), " }")
	if i := strings.Index(body, " comment "); i >= 0 {
		body = body[:i]
	}
	if i := strings.Index(body, " : "); i >= 0 {
		body = body[:i]
	}
	return f[2] + " " + body, true
}

// DanglingRefs reports rules and elements that name a chain, set or map the
// table does not hold: the kernel refuses to delete an object in use.
func DanglingRefs(fake *knftables.Fake) error {
	t := fake.Table
	if t == nil {
		return nil
	}
	check := func(where, text string) error {
		words := strings.Fields(text)
		for i, w := range words {
			if (w == "goto" || w == "jump") && i+1 < len(words) {
				if t.Chains[words[i+1]] == nil {
					return fmt.Errorf("%s refers to missing chain %q", where, words[i+1])
				}
			}
			if name, ok := strings.CutPrefix(w, "@"); ok {
				if t.Sets[name] == nil && t.Maps[name] == nil {
					return fmt.Errorf("%s refers to missing set %q", where, name)
				}
			}
		}
		return nil
	}
	for name, c := range t.Chains {
		for _, r := range c.Rules {
			if err := check("rule in "+name, r.Rule); err != nil {
				return err
			}
		}
	}
	for name, m := range t.Maps {
		for _, e := range m.Elements {
			if err := check("element of "+name, strings.Join(e.Value, " ")); err != nil {
				return err
			}
		}
	}
	return nil
}

// Canonical sorts the element lines of a Fake dump: the Fake keeps elements
// in insertion order, which means nothing (the kernel keeps its own).
func Canonical(dump string) string {
	lines := strings.Split(strings.TrimSuffix(dump, "\n"), "\n")
	var head, elems []string
	for _, l := range lines {
		if strings.HasPrefix(l, "add element ") {
			elems = append(elems, l)
		} else {
			head = append(head, l)
		}
	}
	slices.Sort(elems)
	return strings.Join(append(head, elems...), "\n") + "\n"
}
