package ruleset_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ruleset"
)

func TestServedFrontends(t *testing.T) {
	some := func(svc, ip string) *discovery.EndpointSlice {
		return endpointSlice("ns", svc, svc+"-1", ep{ip: ip, node: "node-b"})
	}
	sctp := func(s *v1.Service) { s.Spec.Ports[0].Protocol = v1.ProtocolSCTP }
	type served struct {
		Frontend string
		Kind     ruleset.FrontendKind
		Owner    string
	}
	tests := []struct {
		name   string
		svcs   []*v1.Service
		slices []*discovery.EndpointSlice
		want   []served
	}{{
		name: "every kind of frontend, sorted, node ports first",
		svcs: []*v1.Service{service("ns", "a", "198.19.0.10", loadBalancer("198.18.0.101"), externalIPs("198.18.0.100"))},
		want: []served{
			{"node port 30080/TCP", ruleset.KindNodePort, "ns/a:http"},
			{"198.18.0.100:80/TCP", ruleset.KindExternalIP, "ns/a:http"},
			{"198.18.0.101:80/TCP", ruleset.KindLoadBalancerIP, "ns/a:http"},
			{"198.19.0.10:80/TCP", ruleset.KindClusterIP, "ns/a:http"},
		},
	}, {
		name: "a contested external IP once, with the owner that forwards",
		svcs: []*v1.Service{
			service("ns", "a", "198.19.0.10", externalIPs("198.18.0.100")),
			service("ns", "b", "198.19.0.11", externalIPs("198.18.0.100")),
		},
		slices: []*discovery.EndpointSlice{some("b", "198.18.2.2")},
		want: []served{
			{"198.18.0.100:80/TCP", ruleset.KindExternalIP, "ns/b:http"},
			{"198.19.0.10:80/TCP", ruleset.KindClusterIP, "ns/a:http"},
			{"198.19.0.11:80/TCP", ruleset.KindClusterIP, "ns/b:http"},
		},
	}, {
		name: "an external IP equal to the port's own cluster IP: once, as the cluster IP",
		svcs: []*v1.Service{service("ns", "a", "198.19.0.10", externalIPs("198.19.0.10"))},
		want: []served{{"198.19.0.10:80/TCP", ruleset.KindClusterIP, "ns/a:http"}},
	}, {
		name: "every protocol",
		svcs: []*v1.Service{service("ns", "s", "198.19.0.12", sctp)},
		want: []served{{"198.19.0.12:80/SCTP", ruleset.KindClusterIP, "ns/s:http"}},
	}, {
		name: "no Services",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []served
			for _, sf := range build(t, v4Config(), tt.svcs, tt.slices).ServedFrontends() {
				got = append(got, served{sf.Frontend.String(), sf.Kind, sf.Service.Name.String()})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ServedFrontends (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPropServedFrontends: ServedFrontends lists, sorted, each destination
// of every frontend of every Service port once (but cluster IPs as a whole
// and invalid addresses), with its Owner and the kind Owner gives.
func TestPropServedFrontends(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, _, rs, _ := genBuilt(t)
		served := rs.ServedFrontends()
		if !slices.IsSortedFunc(served, func(a, b ruleset.ServedFrontend) int { return a.Compare(b.Frontend) }) {
			t.Fatalf("not sorted: %v", served)
		}
		type destination struct {
			addr  netip.Addr
			proto v1.Protocol
			port  uint16
		}
		listed := map[destination]bool{}
		for _, sf := range served {
			d := destination{sf.Addr, sf.Protocol, sf.Port}
			if listed[d] {
				t.Fatalf("%v listed twice", sf.Frontend)
			}
			listed[d] = true
			owner, kind, ok := rs.Owner(sf.Frontend)
			if !ok || owner != sf.Service || kind != sf.Kind {
				t.Fatalf("%v listed with %v (%v), Owner gives %v (%v)", sf.Frontend, sf.Service.Name, sf.Kind, owner.Name, kind)
			}
		}
		for _, s := range rs.Services() {
			for _, f := range s.Frontends() {
				if f.Kind != ruleset.KindClusterAddress && (f.Addr.IsValid() || f.Kind == ruleset.KindNodePort) && !listed[destination{f.Addr, f.Protocol, f.Port}] {
					t.Fatalf("%v of %v not listed", f, s.Name)
				}
			}
		}
	})
}

// TestPropAppendFrontends: AppendFrontends appends what Frontends returns,
// sorted and each once, and leaves what dst held before it as it was.
func TestPropAppendFrontends(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, _, rs, _ := genBuilt(t)
		var all []ruleset.Frontend
		for _, s := range rs.Services() {
			before := slices.Clone(all)
			all = s.AppendFrontends(all)
			if !slices.Equal(all[:len(before)], before) {
				t.Fatalf("%v: AppendFrontends changed what dst held", s.Name)
			}
			if got, want := all[len(before):], s.Frontends(); !slices.Equal(got, want) {
				t.Fatalf("%v: AppendFrontends appended %v, Frontends gives %v", s.Name, got, want)
			}
		}
	})
}
