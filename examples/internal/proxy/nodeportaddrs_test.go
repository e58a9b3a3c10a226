package proxy

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

// TestNodePortScope: --nodeport-addresses resolved per family as
// kube-proxy 1.37 resolves it (cmd/kube-proxy/app/server.go's keyword
// expansion, pkg/proxy/util/nodeport_addresses.go's per-family CIDRs).
func TestNodePortScope(t *testing.T) {
	primary := map[v1.IPFamily]netip.Addr{v1.IPv4Protocol: netip.MustParseAddr("198.18.0.1"), v1.IPv6Protocol: netip.MustParseAddr("2001:db8::1")}
	local := addrList("127.0.0.1", "198.18.0.1", "198.18.0.2", "198.18.5.1", "::1", "2001:db8::1", "2001:db8::2", "fe80::1")
	for _, tt := range []struct {
		name      string
		values    []string
		primary   map[v1.IPFamily]netip.Addr
		family    v1.IPFamily
		all       bool
		addrs     []netip.Addr
		loopback4 bool
	}{
		{name: "unset: all", family: v1.IPv4Protocol, all: true, loopback4: true},
		{name: "unset: all, IPv6", family: v1.IPv6Protocol, all: true},
		{name: "all", values: []string{"all"}, family: v1.IPv6Protocol, all: true},
		{name: "a zero CIDR among others: all", values: []string{"198.18.0.0/24", "0.0.0.0/0"}, family: v1.IPv4Protocol, all: true, loopback4: true},
		{name: "primary", values: []string{"primary"}, primary: primary, family: v1.IPv4Protocol, addrs: addrList("198.18.0.1")},
		{name: "primary, IPv6", values: []string{"primary"}, primary: primary, family: v1.IPv6Protocol, addrs: addrList("2001:db8::1")},
		{name: "primary unknown: all", values: []string{"primary"}, family: v1.IPv4Protocol, all: true, loopback4: true},
		{name: "primary loopback: all", values: []string{"primary"}, primary: map[v1.IPFamily]netip.Addr{v1.IPv4Protocol: netip.MustParseAddr("127.0.0.1")}, family: v1.IPv4Protocol, all: true, loopback4: true},
		{name: "CIDRs match local addresses, sorted", values: []string{"198.18.5.0/24", "198.18.0.0/24"}, family: v1.IPv4Protocol, addrs: addrList("198.18.0.1", "198.18.0.2", "198.18.5.1")},
		{name: "CIDRs of the other family only: all", values: []string{"2001:db8::/64"}, family: v1.IPv4Protocol, all: true, loopback4: true},
		{name: "CIDRs matching nothing: none", values: []string{"203.0.113.0/24"}, family: v1.IPv4Protocol},
		{name: "localhost", values: []string{"localhost"}, family: v1.IPv4Protocol, addrs: addrList("127.0.0.1"), loopback4: true},
		{name: "localhost, IPv6", values: []string{"localhost"}, family: v1.IPv6Protocol, addrs: addrList("::1")},
		{name: "host bits masked", values: []string{"198.18.0.3/30"}, family: v1.IPv4Protocol, addrs: addrList("198.18.0.1", "198.18.0.2")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newNodePortScope(expandNodePortAddresses(tt.values, tt.primary), tt.family)
			if s.all != tt.all || s.ipv4Loopback != tt.loopback4 {
				t.Errorf("all %v, IPv4 loopback %v; want %v, %v", s.all, s.ipv4Loopback, tt.all, tt.loopback4)
			}
			if diff := cmp.Diff(tt.addrs, s.addresses(local), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNodePortAddressesChecked: kube-proxy's validation, one line naming
// the value.
func TestNodePortAddressesChecked(t *testing.T) {
	for _, tt := range []struct {
		values []string
		want   string
	}{
		{[]string{"primary", "198.18.0.0/16", "2001:db8::/64", "localhost", "all"}, ""},
		{[]string{"198.18.0.1"}, `"198.18.0.1" must be a CIDR or one of the keywords primary, localhost, all`},
		{[]string{"Primary"}, `"Primary" must be a CIDR`},
		{[]string{"primary", "primary"}, `"primary" given twice`},
	} {
		err := checkNodePortAddresses(tt.values)
		if (err == nil) != (tt.want == "") || err != nil && !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.values, err, tt.want)
		}
	}
}

// TestNodePortAddressWarning: kube-proxy's warnings (checkBadConfig).
func TestNodePortAddressWarning(t *testing.T) {
	for _, tt := range []struct {
		name     string
		expanded []netip.Prefix
		primary  v1.IPFamily
		dual     bool
		want     string
	}{
		{"unset", nil, v1.IPv4Protocol, false, "nodePortAddresses is unset; NodePort connections will be accepted on all local IPs. Consider using `--nodeport-addresses primary`"},
		{"primary family", prefixList("198.18.0.1/32"), v1.IPv4Protocol, false, ""},
		{"other family only", prefixList("2001:db8::1/128"), v1.IPv4Protocol, false, "cluster appears to be IPv4-primary but nodePortAddresses contains only IPv6 addresses; NodePort connections will be accepted on all local IPv4 IPs"},
		{"dual-stack, primary family only", prefixList("198.18.0.1/32"), v1.IPv4Protocol, true, "cluster appears to be dual-stack but nodePortAddresses contains only IPv4 addresses; NodePort connections will be accepted on all local IPv6 IPs"},
		{"dual-stack, both", prefixList("198.18.0.1/32", "2001:db8::1/128"), v1.IPv6Protocol, true, ""},
	} {
		if got := nodePortAddressWarning(tt.expanded, tt.primary, tt.dual); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func addrList(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixList(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// TestDryRunNodePortsOnTheNodesAddresses: --dry-run need not run on the
// node, so --nodeport-addresses selects among the Node's addresses rather
// than this host's.
func TestDryRunNodePortsOnTheNodesAddresses(t *testing.T) {
	backend := &fakeBackend{family: v1.IPv4Protocol}
	p, eng := testProxy(t, backend)
	p.opts.DryRun, p.opts.NodePortAddresses = true, []string{"198.18.0.0/24"}
	p.state.UpdateNode(node("198.18.0.7", "198.18.5.1"))
	p.state.UpdateService(service("a", "198.19.0.1"))
	if err := eng.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	cfg := backend.synced[len(backend.synced)-1].Config()
	if diff := cmp.Diff(addrList("198.18.0.7"), cfg.NodePortAddresses, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" || cfg.NoNodePortAddresses {
		t.Errorf("NodePort addresses (-want +got), NoNodePortAddresses %v:\n%s", cfg.NoNodePortAddresses, diff)
	}
}
