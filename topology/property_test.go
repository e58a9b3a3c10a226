package topology

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/servicemap"
)

// condition is an endpoint's (ready, serving, terminating).
type condition struct{ ready, serving, terminating bool }

// wellFormed are the conditions the EndpointSlice controller writes for a
// Service without publishNotReadyAddresses: ready implies serving and not
// terminating.
var wellFormed = []condition{
	{true, true, false},
	{false, false, false},
	{false, true, true},
	{false, false, true},
}

var (
	nodeNames = []string{"", "n1", "n2", "n3"}
	zoneNames = []string{"", "z1", "z2", "z3"}
)

// subsetOf draws a sorted subset of names[1:] (never the empty name).
func subsetOf(t *rapid.T, names []string, label string) []string {
	var out []string
	for _, n := range names[1:] {
		if rapid.Bool().Draw(t, label+"-"+n) {
			out = append(out, n)
		}
	}
	return out
}

// genEndpoints draws a sorted list of endpoints with distinct addresses. With
// onlyWellFormed the conditions are ones the controller writes; otherwise any
// combination. Hints are random, or those Hints computes for PreferSameZone or
// PreferSameNode, so that every topology mode is exercised.
func genEndpoints(t *rapid.T, onlyWellFormed bool) []endpoints.Endpoint {
	n := rapid.IntRange(0, 10).Draw(t, "n")
	ids := rapid.SliceOfNDistinct(rapid.IntRange(1, 40), n, n, rapid.ID[int]).Draw(t, "ids")
	eps := make([]endpoints.Endpoint, 0, n)
	for _, id := range ids {
		var c condition
		if onlyWellFormed {
			c = rapid.SampledFrom(wellFormed).Draw(t, "cond")
		} else {
			c = condition{rapid.Bool().Draw(t, "ready"), rapid.Bool().Draw(t, "serving"), rapid.Bool().Draw(t, "terminating")}
		}
		eps = append(eps, endpoints.Endpoint{
			Addr:        netip.AddrFrom4([4]byte{10, 0, 0, byte(id)}),
			Port:        uint16(8080 + id%2), // same address never repeats, so (addr, port) is unique
			Ready:       c.ready,
			Serving:     c.serving,
			Terminating: c.terminating,
			NodeName:    rapid.SampledFrom(nodeNames).Draw(t, "node"),
			Zone:        rapid.SampledFrom(zoneNames).Draw(t, "zone"),
			ZoneHints:   subsetOf(t, zoneNames, "zh"),
			NodeHints:   subsetOf(t, nodeNames, "nh"),
		})
	}
	slices.SortFunc(eps, func(a, b endpoints.Endpoint) int { return a.Compare(&b) })
	switch rapid.IntRange(0, 2).Draw(t, "hinting") {
	case 1:
		eps = Hints(v1.ServiceTrafficDistributionPreferSameZone, eps)
	case 2:
		eps = Hints(v1.ServiceTrafficDistributionPreferSameNode, eps)
	}
	return eps
}

func genServicePort(t *rapid.T) *servicemap.ServicePort {
	sp := &servicemap.ServicePort{
		Port:                80,
		InternalPolicyLocal: rapid.Bool().Draw(t, "iTPLocal"),
		ExternalPolicyLocal: rapid.Bool().Draw(t, "eTPLocal"),
	}
	if rapid.Bool().Draw(t, "nodePort") {
		sp.NodePort = 30080
	}
	if rapid.Bool().Draw(t, "externalIP") {
		sp.ExternalIPs = []netip.Addr{netip.MustParseAddr("198.19.1.1")}
	}
	if rapid.Bool().Draw(t, "lbIP") {
		sp.LoadBalancerIPs = []netip.Addr{netip.MustParseAddr("198.19.2.1")}
	}
	return sp
}

func genNode(t *rapid.T) Node {
	return Node{
		Name: rapid.SampledFrom([]string{"", "n1", "n2", "n4"}).Draw(t, "nodeName"),
		Zone: rapid.SampledFrom([]string{"", "z1", "z2", "z4"}).Draw(t, "nodeZone"),
	}
}

type input struct {
	sp   *servicemap.ServicePort
	eps  []endpoints.Endpoint
	node Node
}

func genInput(t *rapid.T, onlyWellFormed bool) input {
	return input{genServicePort(t), genEndpoints(t, onlyWellFormed), genNode(t)}
}

func lists(r Endpoints) map[string][]endpoints.Endpoint {
	return map[string][]endpoints.Endpoint{"Cluster": r.Cluster, "Local": r.Local, "AllReachable": r.AllReachable}
}

// isSubsequence reports whether sub is eps with some elements left out.
func isSubsequence(sub, eps []endpoints.Endpoint) bool {
	i := 0
	for j := 0; i < len(sub) && j < len(eps); j++ {
		if sub[i].Equal(&eps[j]) {
			i++
		}
	}
	return i == len(sub)
}

func contains(eps []endpoints.Endpoint, e *endpoints.Endpoint) bool {
	return slices.ContainsFunc(eps, func(x endpoints.Endpoint) bool { return x.AddrPort() == e.AddrPort() })
}

// Every endpoint chosen is usable (ready, or serving and terminating), and,
// with well-formed conditions, serving; every list keeps input order.
func TestPropOnlyUsableEndpoints(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		wf := rapid.Bool().Draw(t, "wellFormed")
		in := genInput(t, wf)
		r := Categorize(in.sp, in.eps, in.node)
		for name, list := range lists(r) {
			if !isSubsequence(list, in.eps) {
				t.Fatalf("%s %v is not a subsequence of the input", name, list)
			}
			for _, e := range list {
				if !e.Ready && !(e.Serving && e.Terminating) {
					t.Fatalf("%s has unusable endpoint %+v", name, e)
				}
				if wf && !e.Serving {
					t.Fatalf("%s has non-serving endpoint %+v", name, e)
				}
			}
		}
	})
}

// A terminating endpoint is never chosen while a ready one is usable: cluster
// traffic uses only ready endpoints (and at least one) when any is ready
// anywhere; local traffic uses only ready ones when one is ready locally.
func TestPropReadyBeforeTerminating(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		wf := rapid.Bool().Draw(t, "wellFormed")
		in := genInput(t, wf)
		r := Categorize(in.sp, in.eps, in.node)
		anyReady, localReady := false, false
		for _, e := range in.eps {
			anyReady = anyReady || e.Ready
			localReady = localReady || (e.Ready && in.node.Name != "" && e.NodeName == in.node.Name)
		}
		if anyReady && in.sp.UsesClusterEndpoints() {
			if len(r.Cluster) == 0 {
				t.Fatalf("Cluster is empty although an endpoint is ready")
			}
			for _, e := range r.Cluster {
				if !e.Ready || (wf && e.Terminating) {
					t.Fatalf("Cluster has %+v although an endpoint is ready", e)
				}
			}
		}
		if !anyReady && in.sp.UsesClusterEndpoints() {
			want := []endpoints.Endpoint{}
			for _, e := range in.eps {
				if e.Serving && e.Terminating {
					want = append(want, e)
				}
			}
			if diff := cmp.Diff(want, r.Cluster, addrComparer); diff != "" {
				t.Fatalf("with no ready endpoint, Cluster is not every serving-terminating one (-want +got):\n%s", diff)
			}
		}
		if localReady && in.sp.UsesLocalEndpoints() {
			if len(r.Local) == 0 {
				t.Fatalf("Local is empty although a local endpoint is ready")
			}
			for _, e := range r.Local {
				if !e.Ready || (wf && e.Terminating) {
					t.Fatalf("Local has %+v although a local endpoint is ready", e)
				}
			}
		}
	})
}

// Local holds only endpoints on this node: all the ready ones there, or, when
// none is ready there, all the serving-terminating ones there.
func TestPropLocalOnThisNode(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t, rapid.Bool().Draw(t, "wellFormed"))
		r := Categorize(in.sp, in.eps, in.node)
		for _, e := range r.Local {
			if in.node.Name == "" || e.NodeName != in.node.Name {
				t.Fatalf("Local has %+v, not on node %q", e, in.node.Name)
			}
		}
		if !in.sp.UsesLocalEndpoints() {
			return
		}
		var localReady, localST []endpoints.Endpoint
		for _, e := range in.eps {
			if in.node.Name == "" || e.NodeName != in.node.Name {
				continue
			}
			if e.Ready {
				localReady = append(localReady, e)
			} else if e.Serving && e.Terminating {
				localST = append(localST, e)
			}
		}
		want := localReady
		if len(want) == 0 {
			want = localST
		}
		if diff := cmp.Diff(addrs(want), addrs(r.Local), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("Local mismatch (-want +got):\n%s", diff)
		}
	})
}

// Cluster is nil exactly when the port uses no cluster endpoints, Local when
// it uses no local endpoints; AllReachable is never nil and is the union of
// the two in input order.
func TestPropAllReachableIsUnion(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t, rapid.Bool().Draw(t, "wellFormed"))
		r := Categorize(in.sp, in.eps, in.node)
		if (r.Cluster == nil) == in.sp.UsesClusterEndpoints() {
			t.Fatalf("Cluster nil = %v, UsesClusterEndpoints = %v", r.Cluster == nil, in.sp.UsesClusterEndpoints())
		}
		if (r.Local == nil) == in.sp.UsesLocalEndpoints() {
			t.Fatalf("Local nil = %v, UsesLocalEndpoints = %v", r.Local == nil, in.sp.UsesLocalEndpoints())
		}
		if r.AllReachable == nil {
			t.Fatalf("AllReachable is nil")
		}
		want := []endpoints.Endpoint{}
		for i := range in.eps {
			if contains(r.Cluster, &in.eps[i]) || contains(r.Local, &in.eps[i]) {
				want = append(want, in.eps[i])
			}
		}
		if diff := cmp.Diff(want, r.AllReachable, addrComparer); diff != "" {
			t.Fatalf("AllReachable is not Cluster ∪ Local (-want +got):\n%s", diff)
		}
	})
}

// HasAnyEndpoints holds exactly when some endpoint is ready, or serving and
// terminating, whatever the traffic policies and topology.
func TestPropHasAnyEndpoints(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t, rapid.Bool().Draw(t, "wellFormed"))
		r := Categorize(in.sp, in.eps, in.node)
		want := slices.ContainsFunc(in.eps, func(e endpoints.Endpoint) bool {
			return e.Ready || (e.Serving && e.Terminating)
		})
		if r.HasAnyEndpoints != want {
			t.Fatalf("HasAnyEndpoints = %v, want %v", r.HasAnyEndpoints, want)
		}
		if r.HasAnyEndpoints && in.sp.UsesClusterEndpoints() && len(r.Cluster) == 0 {
			t.Fatalf("HasAnyEndpoints but Cluster is empty")
		}
	})
}

// The choice does not depend on input order: a permuted input gives the same
// endpoints in its own order, and sorting the permutation gives the identical
// result. Categorize does not modify its input, and is deterministic.
func TestPropPermutationInvariant(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t, rapid.Bool().Draw(t, "wellFormed"))
		orig := cloneEndpoints(in.eps)
		want := Categorize(in.sp, in.eps, in.node)
		if diff := cmp.Diff(orig, in.eps, addrComparer); diff != "" {
			t.Fatalf("Categorize modified its input (-before +after):\n%s", diff)
		}
		if diff := cmp.Diff(want, Categorize(in.sp, in.eps, in.node), addrComparer); diff != "" {
			t.Fatalf("Categorize is not deterministic:\n%s", diff)
		}

		perm := rapid.Permutation(in.eps).Draw(t, "perm")
		got := Categorize(in.sp, perm, in.node)
		sortEPs := func(eps []endpoints.Endpoint) []endpoints.Endpoint {
			if eps == nil {
				return nil
			}
			eps = slices.Clone(eps)
			slices.SortFunc(eps, func(a, b endpoints.Endpoint) int { return a.Compare(&b) })
			return eps
		}
		gotSorted := Endpoints{sortEPs(got.Cluster), sortEPs(got.Local), sortEPs(got.AllReachable), got.HasAnyEndpoints}
		if diff := cmp.Diff(want, gotSorted, addrComparer); diff != "" {
			t.Fatalf("permuted input chose other endpoints (-sorted input +permuted input):\n%s", diff)
		}
		if diff := cmp.Diff(want, Categorize(in.sp, sortEPs(perm), in.node), addrComparer); diff != "" {
			t.Fatalf("sorted permutation gave another result (-sorted input +sorted permutation):\n%s", diff)
		}
	})
}

// With hints from Hints, cluster traffic goes where trafficDistribution asks:
// PreferSameNode to the ready endpoints on this node, else PreferSameZone (and
// PreferSameNode's fallback) to the ready endpoints in this zone, when every
// ready endpoint has the node (zone) and one is on this node (in this zone);
// otherwise to every ready endpoint.
func TestPropHintsHonourTrafficDistribution(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		td := rapid.SampledFrom([]string{
			"", v1.ServiceTrafficDistributionPreferClose,
			v1.ServiceTrafficDistributionPreferSameZone, v1.ServiceTrafficDistributionPreferSameNode,
		}).Draw(t, "trafficDistribution")
		sp := &servicemap.ServicePort{Port: 80, TrafficDistribution: td}
		eps := genEndpoints(t, true)
		// Start without hints: those written by Hints are then the only ones.
		for i := range eps {
			eps[i].ZoneHints, eps[i].NodeHints = nil, nil
		}
		node := genNode(t)
		r := Categorize(sp, Hints(sp.TrafficDistribution, eps), node)

		var readyEPs, onNode, inZone []endpoints.Endpoint
		allHaveNode, allHaveZone := true, true
		for _, e := range eps {
			if !e.Ready {
				continue
			}
			readyEPs = append(readyEPs, e)
			allHaveNode = allHaveNode && e.NodeName != ""
			allHaveZone = allHaveZone && e.Zone != ""
			if node.Name != "" && e.NodeName == node.Name {
				onNode = append(onNode, e)
			}
			if node.Zone != "" && e.Zone == node.Zone {
				inZone = append(inZone, e)
			}
		}
		var want []endpoints.Endpoint
		switch {
		case len(readyEPs) == 0:
			want = nil // the terminating fallback, checked elsewhere
		case td == v1.ServiceTrafficDistributionPreferSameNode && allHaveNode && len(onNode) > 0:
			want = onNode
		case td != "" && allHaveZone && len(inZone) > 0:
			want = inZone
		default:
			want = readyEPs
		}
		if want == nil {
			return
		}
		if diff := cmp.Diff(addrs(want), addrs(r.Cluster)); diff != "" {
			t.Fatalf("trafficDistribution %q on %+v: Cluster mismatch (-want +got):\n%s", td, node, diff)
		}
	})
}

// Membership says of each endpoint what Categorize's lists say, and OnNode
// exactly for the endpoints whose NodeName is the node's (not "") name.
func TestPropMembership(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := genInput(t, rapid.Bool().Draw(t, "wellFormed"))
		r := Categorize(in.sp, in.eps, in.node)
		sel := Select(in.sp, in.eps, in.node)
		for i := range in.eps {
			e := &in.eps[i]
			m := sel.Membership(e)
			want := map[string]bool{
				"InCluster": contains(r.Cluster, e),
				"InLocal":   contains(r.Local, e),
				"OnNode":    in.node.Name != "" && e.NodeName == in.node.Name,
			}
			got := map[string]bool{"InCluster": m&InCluster != 0, "InLocal": m&InLocal != 0, "OnNode": m&OnNode != 0}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("Membership of %+v on %+v (-want +got):\n%s", *e, in.node, diff)
			}
		}
	})
}
