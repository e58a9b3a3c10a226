package ruleset

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// spreadWant is what spread must set, made the plain way from Categorize's
// lists: targets in their order, Endpoints the reachable endpoints sorted.
func spreadWant(sp *servicemap.ServicePort, eps []endpoints.Endpoint, node topology.Node) (Service, bool) {
	r := topology.Categorize(sp, eps, node)
	toTargets := func(list []endpoints.Endpoint) []Target {
		var out []Target
		for _, e := range list {
			out = append(out, Target{
				Endpoint: e.AddrPort(),
				Local:    node.Name != "" && e.NodeName == node.Name,
			})
		}
		// kube-proxy's order of a port's endpoints: by their text.
		slices.SortStableFunc(out, func(a, b Target) int { return strings.Compare(a.Endpoint.String(), b.Endpoint.String()) })
		return out
	}
	var s Service
	s.ClusterTargets, s.LocalTargets = toTargets(r.Cluster), toTargets(r.Local)
	s.Endpoints = slices.Clone(r.AllReachable)
	slices.SortStableFunc(s.Endpoints, func(x, y endpoints.Endpoint) int { return x.Compare(&y) })
	return s, r.HasAnyEndpoints
}

// genSpreadEndpoints draws up to 80 endpoints (more than 64, the marks'
// first size) from few addresses, ports and nodes, with any conditions and
// hints, in any order, the same address and port now and then twice: the
// input spread must handle whether or not it is sorted and unique.
func genSpreadEndpoints(t *rapid.T) []endpoints.Endpoint {
	n := rapid.IntRange(0, 80).Draw(t, "n")
	// order: 0 sorted, each address and port once; 1 sorted, with
	// repeats; 2 any order.
	order := rapid.IntRange(0, 2).Draw(t, "order")
	eps := make([]endpoints.Endpoint, n)
	for i := range eps {
		id, port := i, uint16(8080)
		if order == 2 {
			id, port = rapid.IntRange(0, 90).Draw(t, "id"), uint16(8080+rapid.IntRange(0, 1).Draw(t, "port"))
		}
		addr := netip.AddrFrom4([4]byte{198, 18, byte(id / 16), byte(id % 16)})
		if order == 1 && i > 0 && rapid.Bool().Draw(t, "repeat") {
			addr, port = eps[i-1].Addr, eps[i-1].Port
		}
		eps[i] = endpoints.Endpoint{
			Addr:        addr,
			Port:        port,
			Ready:       rapid.Bool().Draw(t, "ready"),
			Serving:     rapid.Bool().Draw(t, "serving"),
			Terminating: rapid.Bool().Draw(t, "terminating"),
			NodeName:    rapid.SampledFrom([]string{"", "node-a", "node-b"}).Draw(t, "node"),
		}
		if rapid.IntRange(0, 3).Draw(t, "hinted") == 0 {
			eps[i].NodeHints = []string{rapid.SampledFrom([]string{"node-a", "node-b"}).Draw(t, "nodeHint")}
			eps[i].ZoneHints = []string{rapid.SampledFrom([]string{"z1", "z2"}).Draw(t, "zoneHint")}
		}
	}
	return eps
}

// Property: spreadPort (spreadAway or spread, with slabs shared by a run
// of ports, as Build's ranges use, and without, as Update does) sets the
// targets and Endpoints that Categorize's lists give, for sorted and for
// unsorted input, of up to 80 endpoints.
func TestPropSpreadMatchesCategorize(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		node := topology.Node{
			Name: rapid.SampledFrom([]string{"", "node-a"}).Draw(t, "nodeName"),
			Zone: rapid.SampledFrom([]string{"", "z1"}).Draw(t, "nodeZone"),
		}
		b := &Builder{config: Config{Family: "IPv4", Node: node}}
		var alloc slabs
		for range rapid.IntRange(1, 4).Draw(t, "ports") {
			sp := servicemap.ServicePort{
				Family:              "IPv4",
				InternalPolicyLocal: rapid.Bool().Draw(t, "iTPLocal"),
				ExternalPolicyLocal: rapid.Bool().Draw(t, "eTPLocal"),
				NodePort:            uint16(rapid.IntRange(0, 1).Draw(t, "nodePort") * 30080),
			}
			eps := genSpreadEndpoints(t)
			orig := slices.Clone(eps)
			want, wantAny := spreadWant(&sp, eps, node)
			alloc.left = rapid.IntRange(1, 3).Draw(t, "left")
			// As a Snapshot holds them when they are sorted, each once
			// (spreadPort may take spreadAway then), else as given.
			port := endpoints.Port{Endpoints: eps}
			if slices.IsSortedFunc(eps, func(x, y endpoints.Endpoint) int { return x.Compare(&y) }) &&
				len(slices.CompactFunc(slices.Clone(eps), func(x, y endpoints.Endpoint) bool { return x.Compare(&y) == 0 })) == len(eps) {
				port = endpoints.PortOf(eps)
			}
			for _, a := range []*slabs{&alloc, nil} {
				got := Service{ServicePort: &sp}
				gotAny := b.spreadPort(&got, port, a)
				if gotAny != wantAny {
					t.Fatalf("spread says has any endpoints %v, want %v", gotAny, wantAny)
				}
				if diff := cmp.Diff(spreadResult(&want), spreadResult(&got), addrPorts); diff != "" {
					t.Fatalf("spread (slabs %v) (-want +got):\n%s", a != nil, diff)
				}
				if cap(got.ClusterTargets) != len(got.ClusterTargets) || cap(got.LocalTargets) != len(got.LocalTargets) {
					t.Fatalf("targets have room beyond their length")
				}
			}
			if !slices.EqualFunc(orig, eps, func(x, y endpoints.Endpoint) bool { return x.Equal(&y) }) {
				t.Fatalf("spread modified its input")
			}
		}
	})
}

// spreadOut is what spread sets in a Service: Endpoints by address and
// port (endpoints that share them may come in either order), nil and empty
// told apart.
type spreadOut struct {
	ClusterTargets, LocalTargets []Target
	Endpoints                    []netip.AddrPort
}

// spreadResult is the spreadOut of s.
func spreadResult(s *Service) spreadOut {
	out := spreadOut{ClusterTargets: s.ClusterTargets, LocalTargets: s.LocalTargets}
	if s.Endpoints != nil {
		out.Endpoints = make([]netip.AddrPort, 0, len(s.Endpoints))
	}
	for i := range s.Endpoints {
		out.Endpoints = append(out.Endpoints, s.Endpoints[i].AddrPort())
	}
	return out
}

var addrPorts = cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })
