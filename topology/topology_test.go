package topology

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Endpoint conditions as the EndpointSlice controller sets them.
const (
	ready       = "ready"       // ready, serving
	servingTerm = "servingTerm" // serving, terminating
	term        = "term"        // terminating, not serving
	unready     = "unready"     // neither
	readyTerm   = "readyTerm"   // ready, terminating, not serving (publishNotReadyAddresses)
)

// ep builds an endpoint 10.0.0.<last>:80.
func ep(last byte, cond, node, zone string) endpoints.Endpoint {
	e := endpoints.Endpoint{
		Addr:     netip.AddrFrom4([4]byte{10, 0, 0, last}),
		Port:     80,
		NodeName: node,
		Zone:     zone,
	}
	switch cond {
	case ready:
		e.Ready, e.Serving = true, true
	case servingTerm:
		e.Serving, e.Terminating = true, true
	case term:
		e.Terminating = true
	case unready:
	case readyTerm:
		e.Ready, e.Terminating = true, true
	default:
		panic("unknown condition " + cond)
	}
	return e
}

func zh(e endpoints.Endpoint, zones ...string) endpoints.Endpoint {
	e.ZoneHints = zones
	return e
}

func nh(e endpoints.Endpoint, nodes ...string) endpoints.Endpoint {
	e.NodeHints = nodes
	return e
}

var (
	nodeA = Node{Name: "node-a", Zone: "zone-a"}

	// Service ports by (internalTrafficPolicy, externalTrafficPolicy, external access).
	itpCluster             = servicemap.ServicePort{Port: 80}
	itpLocal               = servicemap.ServicePort{Port: 80, InternalPolicyLocal: true}
	etpLocalNodePort       = servicemap.ServicePort{Port: 80, NodePort: 30080, ExternalPolicyLocal: true}
	etpLocalExternalIP     = servicemap.ServicePort{Port: 80, ExternalIPs: []netip.Addr{netip.MustParseAddr("198.19.1.1")}, ExternalPolicyLocal: true}
	etpLocalLBIP           = servicemap.ServicePort{Port: 80, NodePort: 30080, LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("198.19.2.1")}, ExternalPolicyLocal: true}
	etpLocalLBIPNoNodePort = servicemap.ServicePort{Port: 80, LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("198.19.2.1")}, ExternalPolicyLocal: true}
	etpLocalNotExternal    = servicemap.ServicePort{Port: 80, ExternalPolicyLocal: true}
	bothLocalNodePort      = servicemap.ServicePort{Port: 80, NodePort: 30080, InternalPolicyLocal: true, ExternalPolicyLocal: true}
	itpLocalETPCluster     = servicemap.ServicePort{Port: 80, NodePort: 30080, InternalPolicyLocal: true}
)

// result is Endpoints with addresses only; a nil list stays nil.
type result struct {
	Cluster, Local, AllReachable []string
	HasAnyEndpoints              bool
}

func addrs(eps []endpoints.Endpoint) []string {
	if eps == nil {
		return nil
	}
	out := []string{}
	for _, e := range eps {
		out = append(out, e.Addr.String())
	}
	return out
}

func summarize(r Endpoints) result {
	return result{addrs(r.Cluster), addrs(r.Local), addrs(r.AllReachable), r.HasAnyEndpoints}
}

func l(s ...string) []string {
	out := []string{}
	for _, x := range s {
		out = append(out, "10.0.0."+x)
	}
	return out
}

func TestCategorize(t *testing.T) {
	tests := []struct {
		name string
		sp   servicemap.ServicePort
		node Node
		eps  []endpoints.Endpoint
		want result
	}{
		// --- traffic policies ---
		{
			name: "no endpoints, cluster policy",
			sp:   itpCluster, node: nodeA,
			want: result{Cluster: l(), AllReachable: l()},
		},
		{
			name: "no endpoints, iTP Local",
			sp:   itpLocal, node: nodeA,
			want: result{Local: l(), AllReachable: l()},
		},
		{
			name: "no endpoints, eTP Local with NodePort",
			sp:   etpLocalNodePort, node: nodeA,
			want: result{Cluster: l(), Local: l(), AllReachable: l()},
		},
		{
			name: "all ready, cluster policy uses every ready endpoint",
			sp:   itpCluster, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, ready, "node-a", ""), ep(2, ready, "node-b", ""), ep(3, unready, "node-a", "")},
			want: result{Cluster: l("1", "2"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "iTP Local uses only local ready endpoints",
			sp:   itpLocal, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, ready, "node-a", ""), ep(2, ready, "node-b", ""), ep(3, ready, "node-a", "")},
			want: result{Local: l("1", "3"), AllReachable: l("1", "3"), HasAnyEndpoints: true},
		},
		{
			name: "iTP Local, endpoints exist but none local",
			sp:   itpLocal, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, ready, "node-b", ""), ep(2, ready, "node-c", "")},
			want: result{Local: l(), AllReachable: l(), HasAnyEndpoints: true},
		},
		{
			name: "iTP Local, no usable endpoint anywhere",
			sp:   itpLocal, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, unready, "node-a", ""), ep(2, term, "node-b", "")},
			want: result{Local: l(), AllReachable: l()},
		},
		{
			name: "eTP Local NodePort, iTP Cluster: cluster and local lists",
			sp:   etpLocalNodePort, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, ready, "node-a", ""), ep(2, ready, "node-b", "")},
			want: result{Cluster: l("1", "2"), Local: l("1"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "eTP Local NodePort, endpoints exist but none local",
			sp:   etpLocalNodePort, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, ready, "node-b", ""), ep(2, ready, "node-c", "")},
			want: result{Cluster: l("1", "2"), Local: l(), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "eTP Local externalIP",
			sp:   etpLocalExternalIP, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, ready, "node-b", ""), ep(2, ready, "node-a", "")},
			want: result{Cluster: l("1", "2"), Local: l("2"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "eTP Local LoadBalancer IP with NodePort",
			sp:   etpLocalLBIP, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, ready, "node-a", ""), ep(2, unready, "node-a", ""), ep(3, ready, "node-b", "")},
			want: result{Cluster: l("1", "3"), Local: l("1"), AllReachable: l("1", "3"), HasAnyEndpoints: true},
		},
		{
			name: "eTP Local LoadBalancer IP without NodePort",
			sp:   etpLocalLBIPNoNodePort, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, ready, "node-a", ""), ep(2, ready, "node-b", "")},
			want: result{Cluster: l("1", "2"), Local: l("1"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "eTP Local without external access is cluster only",
			sp:   etpLocalNotExternal, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, ready, "node-a", ""), ep(2, ready, "node-b", "")},
			want: result{Cluster: l("1", "2"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			// Pods and the node reaching the NodePort or an external address
			// are short-circuited to cluster endpoints, as kube-proxy does.
			name: "iTP and eTP Local with NodePort still uses cluster endpoints",
			sp:   bothLocalNodePort, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, ready, "node-a", ""), ep(2, ready, "node-b", "")},
			want: result{Cluster: l("1", "2"), Local: l("1"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "iTP Local, eTP Cluster with NodePort: cluster for external traffic",
			sp:   itpLocalETPCluster, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, ready, "node-b", ""), ep(2, ready, "node-a", "")},
			want: result{Cluster: l("1", "2"), Local: l("2"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "node without a name has no local endpoints",
			sp:   etpLocalNodePort, node: Node{Zone: "zone-a"},
			eps:  []endpoints.Endpoint{ep(1, ready, "", ""), ep(2, ready, "node-a", "")},
			want: result{Cluster: l("1", "2"), Local: l(), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},

		// --- terminating fallbacks ---
		{
			name: "all terminating and serving: cluster falls back to them",
			sp:   itpCluster, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, servingTerm, "node-a", ""), ep(2, servingTerm, "node-b", "")},
			want: result{Cluster: l("1", "2"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "some terminating not serving: only serving ones",
			sp:   itpCluster, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, servingTerm, "node-a", ""), ep(2, term, "node-b", ""), ep(3, servingTerm, "node-b", "")},
			want: result{Cluster: l("1", "3"), AllReachable: l("1", "3"), HasAnyEndpoints: true},
		},
		{
			name: "all terminating, none serving: nothing",
			sp:   itpCluster, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, term, "node-a", ""), ep(2, term, "node-b", ""), ep(3, unready, "node-b", "")},
			want: result{Cluster: l(), AllReachable: l()},
		},
		{
			name: "one ready among terminating: only the ready one",
			sp:   itpCluster, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, servingTerm, "node-a", ""), ep(2, ready, "node-b", ""), ep(3, servingTerm, "node-b", "")},
			want: result{Cluster: l("2"), AllReachable: l("2"), HasAnyEndpoints: true},
		},
		{
			name: "mixed conditions: ready wins, unready never used",
			sp:   itpCluster, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, unready, "node-a", ""), ep(2, servingTerm, "node-a", ""), ep(3, term, "node-a", ""), ep(4, ready, "node-a", "")},
			want: result{Cluster: l("4"), AllReachable: l("4"), HasAnyEndpoints: true},
		},
		{
			name: "ready overrides serving and terminating (publishNotReadyAddresses)",
			sp:   itpCluster, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, readyTerm, "node-a", ""), ep(2, servingTerm, "node-b", "")},
			want: result{Cluster: l("1"), AllReachable: l("1"), HasAnyEndpoints: true},
		},
		{
			name: "iTP Local: local ready preferred over local serving-terminating",
			sp:   itpLocal, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, servingTerm, "node-a", ""), ep(2, ready, "node-a", "")},
			want: result{Local: l("2"), AllReachable: l("2"), HasAnyEndpoints: true},
		},
		{
			name: "iTP Local: local terminating fallback while remote ready exists",
			sp:   itpLocal, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, servingTerm, "node-a", ""), ep(2, ready, "node-b", ""), ep(3, term, "node-a", "")},
			want: result{Local: l("1"), AllReachable: l("1"), HasAnyEndpoints: true},
		},
		{
			name: "eTP Local: local terminating fallback while cluster has ready",
			sp:   etpLocalNodePort, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, servingTerm, "node-a", ""), ep(2, ready, "node-b", ""), ep(3, servingTerm, "node-b", "")},
			want: result{Cluster: l("2"), Local: l("1"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "eTP Local: everything terminating, both lists fall back",
			sp:   etpLocalNodePort, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, servingTerm, "node-a", ""), ep(2, servingTerm, "node-b", "")},
			want: result{Cluster: l("1", "2"), Local: l("1"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "iTP Local: only remote serving-terminating counts as having endpoints",
			sp:   itpLocal, node: nodeA,
			eps:  []endpoints.Endpoint{ep(1, servingTerm, "node-b", ""), ep(2, term, "node-a", "")},
			want: result{Local: l(), AllReachable: l(), HasAnyEndpoints: true},
		},

		// --- topology hints ---
		{
			name: "zone hints narrow cluster traffic",
			sp:   itpCluster, node: nodeA,
			eps: []endpoints.Endpoint{
				zh(ep(1, ready, "node-a", "zone-a"), "zone-a"),
				zh(ep(2, ready, "node-b", "zone-b"), "zone-b"),
				zh(ep(3, ready, "node-c", "zone-a"), "zone-a"),
			},
			want: result{Cluster: l("1", "3"), AllReachable: l("1", "3"), HasAnyEndpoints: true},
		},
		{
			name: "zone hints ignored when the node has no zone label",
			sp:   itpCluster, node: Node{Name: "node-a"},
			eps: []endpoints.Endpoint{
				zh(ep(1, ready, "node-a", "zone-a"), "zone-a"),
				zh(ep(2, ready, "node-b", "zone-b"), "zone-b"),
			},
			want: result{Cluster: l("1", "2"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "a hint for the zone \"\" matches a node with no zone label, as in kube-proxy",
			sp:   itpCluster, node: Node{Name: "node-a"},
			eps: []endpoints.Endpoint{
				zh(ep(1, ready, "node-a", "zone-a"), "zone-a"),
				zh(ep(2, ready, "node-b", "zone-b"), "", "zone-b"),
			},
			want: result{Cluster: l("2"), AllReachable: l("2"), HasAnyEndpoints: true},
		},
		{
			name: "zone hints ignored when one ready endpoint has none",
			sp:   itpCluster, node: nodeA,
			eps: []endpoints.Endpoint{
				zh(ep(1, ready, "node-a", "zone-a"), "zone-a"),
				ep(2, ready, "node-b", "zone-b"),
				zh(ep(3, ready, "node-c", "zone-b"), "zone-b"),
			},
			want: result{Cluster: l("1", "2", "3"), AllReachable: l("1", "2", "3"), HasAnyEndpoints: true},
		},
		{
			name: "unready endpoint without hints does not matter",
			sp:   itpCluster, node: nodeA,
			eps: []endpoints.Endpoint{
				zh(ep(1, ready, "node-a", "zone-a"), "zone-a"),
				ep(2, unready, "node-b", "zone-b"),
				zh(ep(3, ready, "node-c", "zone-b"), "zone-b"),
				ep(4, servingTerm, "node-a", "zone-a"),
			},
			want: result{Cluster: l("1"), AllReachable: l("1"), HasAnyEndpoints: true},
		},
		{
			name: "unready endpoint hinted for this zone does not count",
			sp:   itpCluster, node: nodeA,
			eps: []endpoints.Endpoint{
				zh(ep(1, unready, "node-a", "zone-a"), "zone-a"),
				zh(ep(2, ready, "node-b", "zone-b"), "zone-b"),
				zh(ep(3, ready, "node-c", "zone-c"), "zone-c"),
			},
			want: result{Cluster: l("2", "3"), AllReachable: l("2", "3"), HasAnyEndpoints: true},
		},
		{
			name: "no endpoint hinted for this zone: hints ignored",
			sp:   itpCluster, node: nodeA,
			eps: []endpoints.Endpoint{
				zh(ep(1, ready, "node-b", "zone-b"), "zone-b"),
				zh(ep(2, ready, "node-c", "zone-c"), "zone-c"),
			},
			want: result{Cluster: l("1", "2"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "multiple zone hints per endpoint",
			sp:   itpCluster, node: nodeA,
			eps: []endpoints.Endpoint{
				zh(ep(1, ready, "node-b", "zone-b"), "zone-a", "zone-b"),
				zh(ep(2, ready, "node-c", "zone-c"), "zone-c"),
				zh(ep(3, ready, "node-d", "zone-b"), "zone-a", "zone-b", "zone-c"),
			},
			want: result{Cluster: l("1", "3"), AllReachable: l("1", "3"), HasAnyEndpoints: true},
		},
		{
			name: "node hints preferred over zone hints",
			sp:   itpCluster, node: nodeA,
			eps: []endpoints.Endpoint{
				nh(zh(ep(1, ready, "node-a", "zone-a"), "zone-a"), "node-a"),
				nh(zh(ep(2, ready, "node-b", "zone-a"), "zone-a"), "node-b"),
				nh(zh(ep(3, ready, "node-c", "zone-b"), "zone-b"), "node-c"),
			},
			want: result{Cluster: l("1"), AllReachable: l("1"), HasAnyEndpoints: true},
		},
		{
			name: "node hints present but none for this node: zone hints",
			sp:   itpCluster, node: nodeA,
			eps: []endpoints.Endpoint{
				nh(zh(ep(1, ready, "node-b", "zone-a"), "zone-a"), "node-b"),
				nh(zh(ep(2, ready, "node-c", "zone-a"), "zone-a"), "node-c"),
				nh(zh(ep(3, ready, "node-d", "zone-b"), "zone-b"), "node-d"),
			},
			want: result{Cluster: l("1", "2"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "node hints missing on one ready endpoint: zone hints",
			sp:   itpCluster, node: nodeA,
			eps: []endpoints.Endpoint{
				nh(zh(ep(1, ready, "node-a", "zone-a"), "zone-a"), "node-a"),
				zh(ep(2, ready, "node-b", "zone-a"), "zone-a"),
				nh(zh(ep(3, ready, "node-c", "zone-b"), "zone-b"), "node-c"),
			},
			want: result{Cluster: l("1", "2"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "node hints without zone hints, node with no zone",
			sp:   itpCluster, node: Node{Name: "node-a"},
			eps: []endpoints.Endpoint{
				nh(ep(1, ready, "node-a", ""), "node-a"),
				nh(ep(2, ready, "node-b", ""), "node-b"),
			},
			want: result{Cluster: l("1"), AllReachable: l("1"), HasAnyEndpoints: true},
		},
		{
			name: "node hints ignored when the node has no name",
			sp:   itpCluster, node: Node{Zone: "zone-a"},
			eps: []endpoints.Endpoint{
				nh(ep(1, ready, "node-a", ""), "node-a"),
				nh(ep(2, ready, "node-b", ""), "node-b"),
			},
			want: result{Cluster: l("1", "2"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "hints do not narrow local traffic; union in input order",
			sp:   etpLocalNodePort, node: nodeA,
			eps: []endpoints.Endpoint{
				zh(ep(1, ready, "node-a", "zone-a"), "zone-b"),
				zh(ep(2, ready, "node-b", "zone-a"), "zone-a"),
				zh(ep(3, ready, "node-c", "zone-b"), "zone-b"),
			},
			want: result{Cluster: l("2"), Local: l("1"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "iTP Local ignores hints",
			sp:   itpLocal, node: nodeA,
			eps: []endpoints.Endpoint{
				nh(ep(1, ready, "node-a", "zone-a"), "node-b"),
				nh(ep(2, ready, "node-b", "zone-a"), "node-a"),
			},
			want: result{Local: l("1"), AllReachable: l("1"), HasAnyEndpoints: true},
		},
		{
			name: "terminating fallback ignores hints",
			sp:   itpCluster, node: nodeA,
			eps: []endpoints.Endpoint{
				zh(ep(1, servingTerm, "node-a", "zone-a"), "zone-b"),
				zh(ep(2, servingTerm, "node-b", "zone-b"), "zone-b"),
				zh(ep(3, term, "node-c", "zone-a"), "zone-a"),
			},
			want: result{Cluster: l("1", "2"), AllReachable: l("1", "2"), HasAnyEndpoints: true},
		},
		{
			name: "serving-terminating endpoint hinted for this zone is not used while a ready one exists",
			sp:   itpCluster, node: nodeA,
			eps: []endpoints.Endpoint{
				zh(ep(1, servingTerm, "node-a", "zone-a"), "zone-a"),
				zh(ep(2, ready, "node-b", "zone-b"), "zone-b"),
			},
			want: result{Cluster: l("2"), AllReachable: l("2"), HasAnyEndpoints: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(Categorize(&tt.sp, tt.eps, tt.node))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Categorize() mismatch (-want +got):\n%s", diff)
			}
			sel := Select(&tt.sp, tt.eps, tt.node)
			if diff := cmp.Diff(tt.want, selected(&sel, tt.eps)); diff != "" {
				t.Errorf("Select() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// selected is the result that sel gives for eps: its lists are the
// addresses of eps that its methods put in them, nil where it uses none.
func selected(sel *Selection, eps []endpoints.Endpoint) result {
	pick := func(uses bool, in func(*endpoints.Endpoint) bool) []string {
		if !uses {
			return nil
		}
		out := []string{}
		for i := range eps {
			if in(&eps[i]) {
				out = append(out, eps[i].Addr.String())
			}
		}
		return out
	}
	return result{
		Cluster:         pick(sel.UsesCluster(), sel.Cluster),
		Local:           pick(sel.UsesLocal(), sel.Local),
		AllReachable:    pick(true, sel.Reachable),
		HasAnyEndpoints: sel.HasAnyEndpoints(),
	}
}

// addrComparer lets cmp compare netip.Addr, whose fields are unexported.
var addrComparer = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func TestHints(t *testing.T) {
	in := []endpoints.Endpoint{
		ep(1, ready, "node-a", "zone-a"),
		nh(zh(ep(2, ready, "node-b", "zone-b"), "zone-a", "zone-c"), "node-a"), // stale hints
		ep(3, ready, "node-c", ""),                                             // no zone
		nh(zh(ep(4, ready, "", ""), "zone-a"), "node-a"),                       // neither
		zh(ep(5, servingTerm, "node-a", "zone-a"), "zone-x"),                   // not ready: kept
		ep(6, unready, "node-b", "zone-b"),                                     // not ready: kept
	}
	zoneWant := []endpoints.Endpoint{
		zh(ep(1, ready, "node-a", "zone-a"), "zone-a"),
		zh(ep(2, ready, "node-b", "zone-b"), "zone-b"),
		ep(3, ready, "node-c", ""),
		ep(4, ready, "", ""),
		zh(ep(5, servingTerm, "node-a", "zone-a"), "zone-x"),
		ep(6, unready, "node-b", "zone-b"),
	}
	nodeWant := []endpoints.Endpoint{
		nh(zh(ep(1, ready, "node-a", "zone-a"), "zone-a"), "node-a"),
		nh(zh(ep(2, ready, "node-b", "zone-b"), "zone-b"), "node-b"),
		nh(ep(3, ready, "node-c", ""), "node-c"),
		ep(4, ready, "", ""),
		zh(ep(5, servingTerm, "node-a", "zone-a"), "zone-x"),
		ep(6, unready, "node-b", "zone-b"),
	}
	tests := []struct {
		td   string
		want []endpoints.Endpoint
	}{
		{v1.ServiceTrafficDistributionPreferClose, zoneWant},
		{v1.ServiceTrafficDistributionPreferSameZone, zoneWant},
		{v1.ServiceTrafficDistributionPreferSameNode, nodeWant},
		{"", in},
		{"PreferSomewhere", in},
		{"prefersamezone", in}, // values are case-sensitive
	}
	for _, tt := range tests {
		t.Run("td="+tt.td, func(t *testing.T) {
			orig := cloneEndpoints(in)
			got := Hints(tt.td, in)
			if diff := cmp.Diff(tt.want, got, addrComparer); diff != "" {
				t.Errorf("Hints() mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(orig, in, addrComparer); diff != "" {
				t.Errorf("Hints() modified its input (-before +after):\n%s", diff)
			}
		})
	}
}

func TestHintsUnchangedReturnsInput(t *testing.T) {
	in := []endpoints.Endpoint{zh(ep(1, ready, "node-a", "zone-a"), "zone-b")}
	if got := Hints("", in); &got[0] != &in[0] {
		t.Errorf("Hints(\"\") returned a copy, want its input")
	}
	if got := Hints(v1.ServiceTrafficDistributionPreferClose, in); &got[0] == &in[0] {
		t.Errorf("Hints(PreferClose) returned its input, want a new slice")
	}
	if got := Hints(v1.ServiceTrafficDistributionPreferClose, nil); len(got) != 0 {
		t.Errorf("Hints(PreferClose, nil) = %v, want empty", got)
	}
}

func TestHintsThenCategorize(t *testing.T) {
	eps := []endpoints.Endpoint{
		ep(1, ready, "node-a", "zone-a"),
		ep(2, ready, "node-b", "zone-a"),
		ep(3, ready, "node-c", "zone-b"),
		ep(4, servingTerm, "node-a", "zone-a"),
	}
	tests := []struct {
		td   string
		node Node
		want []string
	}{
		{"", nodeA, l("1", "2", "3")},
		{v1.ServiceTrafficDistributionPreferClose, nodeA, l("1", "2")},
		{v1.ServiceTrafficDistributionPreferSameZone, nodeA, l("1", "2")},
		{v1.ServiceTrafficDistributionPreferSameZone, Node{Name: "node-x", Zone: "zone-b"}, l("3")},
		{v1.ServiceTrafficDistributionPreferSameZone, Node{Name: "node-x", Zone: "zone-x"}, l("1", "2", "3")},
		{v1.ServiceTrafficDistributionPreferSameNode, nodeA, l("1")},
		{v1.ServiceTrafficDistributionPreferSameNode, Node{Name: "node-x", Zone: "zone-a"}, l("1", "2")},
		{v1.ServiceTrafficDistributionPreferSameNode, Node{Name: "node-x"}, l("1", "2", "3")},
	}
	for _, tt := range tests {
		t.Run(tt.td+"/"+tt.node.Name+"/"+tt.node.Zone, func(t *testing.T) {
			got := addrs(Categorize(&itpCluster, Hints(tt.td, eps), tt.node).Cluster)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Cluster mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeFromObject(t *testing.T) {
	tests := []struct {
		name string
		node *v1.Node
		want Node
	}{
		{"nil", nil, Node{}},
		{"no labels", &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, Node{Name: "n1"}},
		{"zone label", &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
			v1.LabelTopologyZone: "z1", v1.LabelTopologyRegion: "r1",
		}}}, Node{Name: "n1", Zone: "z1"}},
		{"only the deprecated zone label", &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
			v1.LabelFailureDomainBetaZone: "z1",
		}}}, Node{Name: "n1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, NodeFromObject(tt.node)); diff != "" {
				t.Errorf("NodeFromObject() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// cloneEndpoints deep-copies eps, hint slices included.
func cloneEndpoints(eps []endpoints.Endpoint) []endpoints.Endpoint {
	if eps == nil {
		return nil
	}
	out := make([]endpoints.Endpoint, len(eps))
	for i, e := range eps {
		if e.ZoneHints != nil {
			e.ZoneHints = append([]string{}, e.ZoneHints...)
		}
		if e.NodeHints != nil {
			e.NodeHints = append([]string{}, e.NodeHints...)
		}
		out[i] = e
	}
	return out
}
