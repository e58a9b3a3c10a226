package conntrack_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/conntrack"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

var cmpOpts = cmp.Options{
	cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b }),
	cmpopts.EquateEmpty(),
}

// flow is an entry and whether it must be found stale.
type flow struct {
	proto       v1.Protocol // UDP when empty
	orig, reply string
	stale       bool
}

func (f flow) Flow() conntrack.Flow {
	p := f.proto
	if p == "" {
		p = v1.ProtocolUDP
	}
	return conntrack.Flow{Protocol: p, OrigDst: ap(f.orig), ReplySrc: ap(f.reply)}
}

func TestStaleFilters(t *testing.T) {
	dns := func(eps ...string) svc {
		return svc{name: "dns", clusterIP: "198.19.0.10", port: 53, eps: eps}
	}
	dnsName := name("dns", v1.ProtocolUDP)
	tests := []struct {
		name     string
		family   v1.IPFamily // IPv4 when empty
		svcs     []svc
		previous []svc // Options.Previous when not nil
		opts     conntrack.Options
		want     []conntrack.Filter
		flows    []flow
	}{
		{
			name: "endpoint removed",
			svcs: []svc{dns("198.18.64.3")},
			want: []conntrack.Filter{{Service: dnsName, Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.10:53"), Allowed: aps("198.18.64.3:53")}},
			flows: []flow{
				{orig: "198.19.0.10:53", reply: "198.18.64.2:53", stale: true}, // the removed pod
				{orig: "198.19.0.10:53", reply: "198.18.64.3:53"},              // the remaining one
				{orig: "198.19.0.11:53", reply: "198.18.64.2:53"},              // not a frontend
				{orig: "198.19.0.10:54", reply: "198.18.64.2:53"},              // not the Service port
				{proto: v1.ProtocolTCP, orig: "198.19.0.10:53", reply: "198.18.64.2:53"},
			},
		},
		{
			name: "endpoint replaced",
			svcs: []svc{dns("198.18.64.9")},
			want: []conntrack.Filter{{Service: dnsName, Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.10:53"), Allowed: aps("198.18.64.9:53")}},
			flows: []flow{
				{orig: "198.19.0.10:53", reply: "198.18.64.2:53", stale: true},
				{orig: "198.19.0.10:53", reply: "198.18.64.9:53"},
				// Not DNATed: sent before the rules existed.
				{orig: "198.19.0.10:53", reply: "198.19.0.10:53", stale: true},
			},
		},
		{
			name: "target port changed: same pod, old port is stale",
			svcs: []svc{{name: "dns", clusterIP: "198.19.0.10", port: 53, target: 5353, eps: []string{"198.18.64.2"}}},
			want: []conntrack.Filter{{Service: dnsName, Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.10:53"), Allowed: aps("198.18.64.2:5353")}},
			flows: []flow{
				{orig: "198.19.0.10:53", reply: "198.18.64.2:53", stale: true},
				{orig: "198.19.0.10:53", reply: "198.18.64.2:5353"},
			},
		},
		{
			name: "endpoints to zero: every entry goes",
			svcs: []svc{dns()},
			want: []conntrack.Filter{{Service: dnsName, Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.10:53")}},
			flows: []flow{
				{orig: "198.19.0.10:53", reply: "198.18.64.2:53", stale: true},
				{orig: "198.19.0.10:53", reply: "198.18.64.3:53", stale: true},
			},
		},
		{
			name: "only unusable endpoints: every entry goes",
			svcs: []svc{dns("198.18.64.2!")},
			want: []conntrack.Filter{{Service: dnsName, Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.10:53")}},
			flows: []flow{
				{orig: "198.19.0.10:53", reply: "198.18.64.2:53", stale: true},
			},
		},
		{
			name: "terminating endpoint while a ready one exists: still serving, kept",
			svcs: []svc{dns("198.18.64.2~", "198.18.64.3")},
			want: []conntrack.Filter{{Service: dnsName, Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.10:53"), Allowed: aps("198.18.64.2:53", "198.18.64.3:53")}},
			flows: []flow{
				{orig: "198.19.0.10:53", reply: "198.18.64.2:53"},
				{orig: "198.19.0.10:53", reply: "198.18.64.3:53"},
			},
		},
		{
			name: "only terminating endpoints: still served, kept",
			svcs: []svc{dns("198.18.64.2~")},
			want: []conntrack.Filter{{Service: dnsName, Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.10:53"), Allowed: aps("198.18.64.2:53")}},
			flows: []flow{
				{orig: "198.19.0.10:53", reply: "198.18.64.2:53"},
			},
		},
		{
			name:  "Service removed, no previous Ruleset: nothing known, nothing deleted",
			svcs:  nil,
			want:  nil,
			flows: []flow{{orig: "198.19.0.10:53", reply: "198.18.64.2:53"}},
		},
		{
			name:     "Service removed, previous Ruleset given: all its entries go",
			svcs:     []svc{{name: "other", clusterIP: "198.19.0.20", port: 53, eps: []string{"198.18.64.7"}}},
			previous: []svc{dns("198.18.64.2"), {name: "other", clusterIP: "198.19.0.20", port: 53, eps: []string{"198.18.64.7"}}},
			want: []conntrack.Filter{
				{Service: dnsName, Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.10:53")},
				{Service: name("other", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.20:53"), Allowed: aps("198.18.64.7:53")},
			},
			flows: []flow{
				{orig: "198.19.0.10:53", reply: "198.18.64.2:53", stale: true},
				{orig: "198.19.0.20:53", reply: "198.18.64.7:53"},
			},
		},
		{
			name:     "cluster IP reused by a new Service: judged by the new one only",
			svcs:     []svc{{name: "new", clusterIP: "198.19.0.10", port: 53, eps: []string{"198.18.64.5"}}},
			previous: []svc{dns("198.18.64.2")},
			want: []conntrack.Filter{
				{Service: name("new", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.10:53"), Allowed: aps("198.18.64.5:53")},
			},
			flows: []flow{
				{orig: "198.19.0.10:53", reply: "198.18.64.2:53", stale: true},
				{orig: "198.19.0.10:53", reply: "198.18.64.5:53"},
			},
		},
		{
			name: "NodePort: any address at the node port",
			svcs: []svc{{name: "np", clusterIP: "198.19.0.30", port: 53, nodePort: 30053, eps: []string{"198.18.64.2"}}},
			want: []conntrack.Filter{
				{Service: name("np", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.30:53"), Allowed: aps("198.18.64.2:53")},
				{Service: name("np", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, NodePort: 30053, Allowed: aps("198.18.64.2:53")},
			},
			flows: []flow{
				{orig: "198.18.0.1:30053", reply: "198.18.64.9:53", stale: true},
				{orig: "198.18.0.1:30053", reply: "198.18.64.2:53"},
				{orig: "127.0.0.1:30053", reply: "198.18.64.9:53", stale: true},
				{orig: "198.18.0.1:30054", reply: "198.18.64.9:53"},
				{proto: v1.ProtocolTCP, orig: "198.18.0.1:30053", reply: "198.18.64.9:53"},
			},
		},
		{
			name: "NodePort number equal to another Service's port: the exact frontend decides",
			svcs: []svc{
				{name: "np", clusterIP: "198.19.0.30", port: 53, nodePort: 30053, eps: []string{"198.18.64.2"}},
				{name: "odd", clusterIP: "198.19.0.31", port: 30053, eps: []string{"198.18.64.4"}},
			},
			want: []conntrack.Filter{
				{Service: name("np", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.30:53"), Allowed: aps("198.18.64.2:53")},
				{Service: name("odd", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.31:30053"), Allowed: aps("198.18.64.4:30053")},
				{Service: name("np", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, NodePort: 30053, Allowed: aps("198.18.64.2:53")},
			},
			flows: []flow{
				{orig: "198.19.0.31:30053", reply: "198.18.64.4:30053"},
				{orig: "198.19.0.31:30053", reply: "198.18.64.2:53", stale: true},
				{orig: "198.18.0.1:30053", reply: "198.18.64.4:30053", stale: true},
			},
		},
		{
			name: "externalIP",
			svcs: []svc{{name: "ext", clusterIP: "198.19.0.40", port: 53, external: []string{"198.18.0.100"}, eps: []string{"198.18.64.2"}}},
			want: []conntrack.Filter{
				{Service: name("ext", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.18.0.100:53"), Allowed: aps("198.18.64.2:53")},
				{Service: name("ext", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.40:53"), Allowed: aps("198.18.64.2:53")},
			},
			flows: []flow{
				{orig: "198.18.0.100:53", reply: "198.18.64.3:53", stale: true},
				{orig: "198.18.0.100:53", reply: "198.18.64.2:53"},
			},
		},
		{
			name:     "externalIP removed, previous Ruleset given: its entries go",
			svcs:     []svc{{name: "ext", clusterIP: "198.19.0.40", port: 53, eps: []string{"198.18.64.2"}}},
			previous: []svc{{name: "ext", clusterIP: "198.19.0.40", port: 53, external: []string{"198.18.0.100"}, eps: []string{"198.18.64.2"}}},
			want: []conntrack.Filter{
				{Service: name("ext", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.18.0.100:53")},
				{Service: name("ext", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.40:53"), Allowed: aps("198.18.64.2:53")},
			},
			flows: []flow{
				{orig: "198.18.0.100:53", reply: "198.18.64.2:53", stale: true},
				{orig: "198.19.0.40:53", reply: "198.18.64.2:53"},
			},
		},
		{
			name:     "node port changed, previous Ruleset given: the old one's entries go",
			svcs:     []svc{{name: "np", clusterIP: "198.19.0.30", port: 53, nodePort: 30054, eps: []string{"198.18.64.2"}}},
			previous: []svc{{name: "np", clusterIP: "198.19.0.30", port: 53, nodePort: 30053, eps: []string{"198.18.64.2"}}},
			want: []conntrack.Filter{
				{Service: name("np", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.30:53"), Allowed: aps("198.18.64.2:53")},
				{Service: name("np", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, NodePort: 30053},
				{Service: name("np", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, NodePort: 30054, Allowed: aps("198.18.64.2:53")},
			},
			flows: []flow{
				{orig: "198.18.0.1:30053", reply: "198.18.64.2:53", stale: true},
				{orig: "198.18.0.1:30054", reply: "198.18.64.2:53"},
			},
		},
		{
			name: "load-balancer IP",
			svcs: []svc{{name: "lb", clusterIP: "198.19.0.50", port: 53, nodePort: 30055, lb: []string{"198.18.1.50"}, eps: []string{"198.18.64.2", "198.18.64.3"}}},
			want: []conntrack.Filter{
				{Service: name("lb", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.18.1.50:53"), Allowed: aps("198.18.64.2:53", "198.18.64.3:53")},
				{Service: name("lb", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.50:53"), Allowed: aps("198.18.64.2:53", "198.18.64.3:53")},
				{Service: name("lb", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, NodePort: 30055, Allowed: aps("198.18.64.2:53", "198.18.64.3:53")},
			},
			flows: []flow{
				{orig: "198.18.1.50:53", reply: "198.18.64.4:53", stale: true},
				{orig: "198.18.1.50:53", reply: "198.18.64.3:53"},
			},
		},
		{
			name:   "IPv6",
			family: v1.IPv6Protocol,
			svcs:   []svc{{name: "dns6", clusterIP: "2001:db8:19::10", port: 53, nodePort: 30056, eps: []string{"2001:db8:18:41::2"}}},
			want: []conntrack.Filter{
				{Service: name("dns6", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("[2001:db8:19::10]:53"), Allowed: aps("[2001:db8:18:41::2]:53")},
				{Service: name("dns6", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, NodePort: 30056, Allowed: aps("[2001:db8:18:41::2]:53")},
			},
			flows: []flow{
				{orig: "[2001:db8:19::10]:53", reply: "[2001:db8:18:40::2]:53", stale: true},
				{orig: "[2001:db8:19::10]:53", reply: "[2001:db8:18:41::2]:53"},
				{orig: "[2001:db8:18::1]:30056", reply: "[2001:db8:18:40::2]:53", stale: true},
			},
		},
		{
			name: "TCP untouched",
			svcs: []svc{
				{name: "web", proto: v1.ProtocolTCP, clusterIP: "198.19.0.60", port: 80, nodePort: 30080},
				{name: "web2", proto: v1.ProtocolTCP, clusterIP: "198.19.0.61", port: 80, eps: []string{"198.18.64.2"}},
			},
			want: nil,
			flows: []flow{
				{proto: v1.ProtocolTCP, orig: "198.19.0.60:80", reply: "198.18.64.2:80"},
				{proto: v1.ProtocolTCP, orig: "198.18.0.1:30080", reply: "198.18.64.2:80"},
				{orig: "198.19.0.60:80", reply: "198.18.64.2:80"},
			},
		},
		{
			name: "SCTP without the option: untouched",
			svcs: []svc{{name: "sig", proto: v1.ProtocolSCTP, clusterIP: "198.19.0.70", port: 3868}},
			want: nil,
			flows: []flow{
				{proto: v1.ProtocolSCTP, orig: "198.19.0.70:3868", reply: "198.18.64.2:3868"},
			},
		},
		{
			name: "SCTP with the option",
			svcs: []svc{{name: "sig", proto: v1.ProtocolSCTP, clusterIP: "198.19.0.70", port: 3868, eps: []string{"198.18.64.3"}}},
			opts: conntrack.Options{SCTP: true},
			want: []conntrack.Filter{
				{Service: name("sig", v1.ProtocolSCTP), Protocol: v1.ProtocolSCTP, Frontend: ap("198.19.0.70:3868"), Allowed: aps("198.18.64.3:3868")},
			},
			flows: []flow{
				{proto: v1.ProtocolSCTP, orig: "198.19.0.70:3868", reply: "198.18.64.2:3868", stale: true},
				{proto: v1.ProtocolSCTP, orig: "198.19.0.70:3868", reply: "198.18.64.3:3868"},
				{orig: "198.19.0.70:3868", reply: "198.18.64.2:3868"},
			},
		},
		{
			name: "two Services sharing an external IP and port: either's endpoints keep",
			svcs: []svc{
				{name: "a", clusterIP: "198.19.0.80", port: 53, external: []string{"198.18.0.100"}, eps: []string{"198.18.64.2"}},
				{name: "b", clusterIP: "198.19.0.81", port: 53, external: []string{"198.18.0.100"}, eps: []string{"198.18.64.3"}},
			},
			want: []conntrack.Filter{
				{Service: name("a", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.18.0.100:53"), Allowed: aps("198.18.64.2:53")},
				{Service: name("b", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.18.0.100:53"), Allowed: aps("198.18.64.3:53")},
				{Service: name("a", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.80:53"), Allowed: aps("198.18.64.2:53")},
				{Service: name("b", v1.ProtocolUDP), Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.81:53"), Allowed: aps("198.18.64.3:53")},
			},
			flows: []flow{
				{orig: "198.18.0.100:53", reply: "198.18.64.2:53"},
				{orig: "198.18.0.100:53", reply: "198.18.64.3:53"},
				{orig: "198.18.0.100:53", reply: "198.18.64.4:53", stale: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			family := tt.family
			if family == "" {
				family = v1.IPv4Protocol
			}
			rs := build(t, family, tt.svcs...)
			opts := tt.opts
			if tt.previous != nil {
				opts.Previous = build(t, family, tt.previous...)
			}
			got := conntrack.StaleFilters(rs, opts)
			if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
				t.Errorf("StaleFilters (-want +got):\n%s", diff)
			}
			m := conntrack.NewMatcher(got)
			for _, f := range tt.flows {
				if stale := m.Matches(f.Flow()); stale != f.stale {
					t.Errorf("Matcher.Matches(%v) = %v, want %v", f.Flow(), stale, f.stale)
				}
			}
			// Determinism: the same Services in reverse order give equal
			// filters.
			rev := slices.Clone(tt.svcs)
			slices.Reverse(rev)
			if diff := cmp.Diff(got, conntrack.StaleFilters(build(t, family, rev...), opts), cmpOpts); diff != "" {
				t.Errorf("StaleFilters depends on input order (-first +reversed):\n%s", diff)
			}
		})
	}
}

func TestFilterMatches(t *testing.T) {
	frontend := conntrack.Filter{Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.10:53"), Allowed: aps("198.18.64.2:53", "198.18.64.3:53")}
	nodePort := conntrack.Filter{Protocol: v1.ProtocolUDP, NodePort: 30053, Allowed: aps("198.18.64.2:53")}
	none := conntrack.Filter{Protocol: v1.ProtocolUDP, Frontend: ap("198.19.0.10:53")}
	tests := []struct {
		filter conntrack.Filter
		flow   conntrack.Flow
		want   bool
	}{
		{frontend, conntrack.Flow{Protocol: v1.ProtocolUDP, OrigDst: ap("198.19.0.10:53"), ReplySrc: ap("198.18.64.4:53")}, true},
		{frontend, conntrack.Flow{Protocol: v1.ProtocolUDP, OrigDst: ap("198.19.0.10:53"), ReplySrc: ap("198.18.64.3:53")}, false},
		{frontend, conntrack.Flow{Protocol: v1.ProtocolUDP, OrigDst: ap("198.19.0.10:53"), ReplySrc: ap("198.18.64.3:54")}, true},
		{frontend, conntrack.Flow{Protocol: v1.ProtocolTCP, OrigDst: ap("198.19.0.10:53"), ReplySrc: ap("198.18.64.4:53")}, false},
		{frontend, conntrack.Flow{Protocol: v1.ProtocolUDP, OrigDst: ap("198.19.0.11:53"), ReplySrc: ap("198.18.64.4:53")}, false},
		// An IPv4-mapped address from the kernel compares as IPv4.
		{frontend, conntrack.Flow{Protocol: v1.ProtocolUDP, OrigDst: ap("[::ffff:198.19.0.10]:53"), ReplySrc: ap("[::ffff:198.18.64.2]:53")}, false},
		{nodePort, conntrack.Flow{Protocol: v1.ProtocolUDP, OrigDst: ap("203.0.113.1:30053"), ReplySrc: ap("198.18.64.4:53")}, true},
		{nodePort, conntrack.Flow{Protocol: v1.ProtocolUDP, OrigDst: ap("203.0.113.1:30053"), ReplySrc: ap("198.18.64.2:53")}, false},
		{nodePort, conntrack.Flow{Protocol: v1.ProtocolUDP, OrigDst: ap("203.0.113.1:30054"), ReplySrc: ap("198.18.64.4:53")}, false},
		{none, conntrack.Flow{Protocol: v1.ProtocolUDP, OrigDst: ap("198.19.0.10:53"), ReplySrc: ap("198.19.0.10:53")}, true},
		{none, conntrack.Flow{}, false},
	}
	for _, tt := range tests {
		if got := tt.filter.Matches(tt.flow); got != tt.want {
			t.Errorf("%v.Matches(%v) = %v, want %v", tt.filter, tt.flow, got, tt.want)
		}
		if got := conntrack.NewMatcher([]conntrack.Filter{tt.filter}).Matches(tt.flow); got != tt.want {
			t.Errorf("Matcher{%v}.Matches(%v) = %v, want %v", tt.filter, tt.flow, got, tt.want)
		}
	}
}

func TestNeedsCleanup(t *testing.T) {
	udpName := servicemap.PortName{Namespace: "ns", Name: "dns", Protocol: v1.ProtocolUDP}
	tcpName := servicemap.PortName{Namespace: "ns", Name: "web", Protocol: v1.ProtocolTCP}
	sctpName := servicemap.PortName{Namespace: "ns", Name: "sig", Protocol: v1.ProtocolSCTP}
	tests := []struct {
		name string
		ch   ruleset.Changes
		opts conntrack.Options
		want bool
	}{
		{"nothing", ruleset.Changes{}, conntrack.Options{}, false},
		{"TCP changes only", ruleset.Changes{Added: []servicemap.PortName{tcpName}, Changed: []servicemap.PortName{tcpName}, Removed: []servicemap.PortName{tcpName}}, conntrack.Options{}, false},
		{"UDP added", ruleset.Changes{Added: []servicemap.PortName{udpName}}, conntrack.Options{}, true},
		{"UDP changed", ruleset.Changes{Changed: []servicemap.PortName{tcpName, udpName}}, conntrack.Options{}, true},
		{"UDP removed", ruleset.Changes{Removed: []servicemap.PortName{udpName}}, conntrack.Options{}, true},
		{"SCTP without option", ruleset.Changes{Changed: []servicemap.PortName{sctpName}}, conntrack.Options{}, false},
		{"SCTP with option", ruleset.Changes{Changed: []servicemap.PortName{sctpName}}, conntrack.Options{SCTP: true}, true},
		{"config changed", ruleset.Changes{ConfigChanged: true}, conntrack.Options{}, true},
	}
	for _, tt := range tests {
		if got := conntrack.NeedsCleanup(tt.ch, tt.opts); got != tt.want {
			t.Errorf("%s: NeedsCleanup = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A Ruleset change through the real Diff: endpoints of a UDP Service change.
func TestNeedsCleanupFromDiff(t *testing.T) {
	before := build(t, v1.IPv4Protocol, svc{name: "dns", clusterIP: "198.19.0.10", port: 53, eps: []string{"198.18.64.2"}})
	after := build(t, v1.IPv4Protocol, svc{name: "dns", clusterIP: "198.19.0.10", port: 53, eps: []string{"198.18.64.3"}})
	if !conntrack.NeedsCleanup(ruleset.Diff(before, after), conntrack.Options{}) {
		t.Error("NeedsCleanup = false after a UDP endpoint change")
	}
	if conntrack.NeedsCleanup(ruleset.Diff(after, after), conntrack.Options{}) {
		t.Error("NeedsCleanup = true with no change")
	}
}

func TestStaleFiltersNil(t *testing.T) {
	if got := conntrack.StaleFilters(nil, conntrack.Options{}); len(got) != 0 {
		t.Errorf("StaleFilters(nil) = %v", got)
	}
}

// TestNetlinkCleanerNetNS: a namespace that cannot be opened is an error,
// never a silent fall-back to the process's own table; a zero
// NetlinkCleaner fails rather than panics.
func TestNetlinkCleanerNetNS(t *testing.T) {
	if _, err := conntrack.NewNetlinkCleaner(conntrack.CleanerConfig{NetNS: "/nonexistent/netns"}); err == nil {
		t.Error("NewNetlinkCleaner with a missing namespace: no error")
	}
	var zero conntrack.NetlinkCleaner
	if _, err := zero.Clean(v1.IPv4Protocol, nil); err == nil {
		t.Error("Clean on a zero NetlinkCleaner: no error")
	}
	zero.Close()
}
