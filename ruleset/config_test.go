package ruleset_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     ruleset.Config
		wantErr string // "" for valid
	}{
		{"IPv4 minimal", ruleset.Config{Family: v1.IPv4Protocol}, ""},
		{"IPv6 minimal", ruleset.Config{Family: v1.IPv6Protocol}, ""},
		{"no family", ruleset.Config{}, `unknown IP family ""`},
		{"unknown family", ruleset.Config{Family: "IPv5"}, `unknown IP family "IPv5"`},
		{"mark default", ruleset.Config{Family: v1.IPv4Protocol, MasqueradeMark: 0}, ""},
		{"mark bit 0", ruleset.Config{Family: v1.IPv4Protocol, MasqueradeMark: 1}, ""},
		{"mark bit 31", ruleset.Config{Family: v1.IPv4Protocol, MasqueradeMark: 1 << 31}, ""},
		{"mark two bits", ruleset.Config{Family: v1.IPv4Protocol, MasqueradeMark: 0x4001}, "masquerade mark 0x4001 is not a single bit"},
		{"mark all bits", ruleset.Config{Family: v1.IPv4Protocol, MasqueradeMark: 0xffffffff}, "not a single bit"},
		{"Service CIDR", ruleset.Config{Family: v1.IPv6Protocol, ServiceCIDRs: pfx("2001:db8:19::/108")}, ""},
		{
			"IPv4 Service CIDR in IPv6 config",
			ruleset.Config{Family: v1.IPv6Protocol, ServiceCIDRs: pfx("198.19.0.0/16")},
			"Service CIDR 198.19.0.0/16 is not a valid IPv6 prefix",
		},
		{
			"cluster CIDRs of the family",
			ruleset.Config{Family: v1.IPv4Protocol, ClusterCIDRs: pfx("198.18.0.0/16", "10.0.0.0/8")},
			"",
		},
		{
			"IPv6 cluster CIDR in IPv4 config",
			ruleset.Config{Family: v1.IPv4Protocol, ClusterCIDRs: pfx("198.18.0.0/16", "2001:db8::/64")},
			"cluster CIDR 2001:db8::/64 is not a valid IPv4 prefix",
		},
		{
			"IPv4 cluster CIDR in IPv6 config",
			ruleset.Config{Family: v1.IPv6Protocol, ClusterCIDRs: pfx("198.18.0.0/16")},
			"cluster CIDR 198.18.0.0/16 is not a valid IPv6 prefix",
		},
		{
			"invalid cluster CIDR",
			ruleset.Config{Family: v1.IPv4Protocol, ClusterCIDRs: []netip.Prefix{{}}},
			"cluster CIDR invalid Prefix is not a valid IPv4 prefix",
		},
		{
			"IPv4-mapped cluster CIDR in IPv4 config",
			ruleset.Config{Family: v1.IPv4Protocol, ClusterCIDRs: pfx("::ffff:198.18.0.0/112")},
			"cluster CIDR ::ffff:198.18.0.0/112 is not a valid IPv4 prefix",
		},
		{
			"allowed externalIPs of the family",
			ruleset.Config{Family: v1.IPv6Protocol, RestrictExternalIPs: true, AllowedExternalIPs: pfx("2001:db8:1::/48")},
			"",
		},
		{
			"IPv4 allowed externalIPs in IPv6 config",
			ruleset.Config{Family: v1.IPv6Protocol, AllowedExternalIPs: pfx("2001:db8:1::/48", "198.19.0.0/16")},
			"allowed externalIPs CIDR 198.19.0.0/16 is not a valid IPv6 prefix",
		},
		{
			"node port addresses of the family",
			ruleset.Config{Family: v1.IPv4Protocol, NodePortAddresses: addrs("198.18.0.1", "198.18.0.2")},
			"",
		},
		{
			"IPv6 node port address in IPv4 config",
			ruleset.Config{Family: v1.IPv4Protocol, NodePortAddresses: addrs("198.18.0.1", "2001:db8::1")},
			"NodePort address 2001:db8::1 is not a valid IPv4 address",
		},
		{
			"IPv4 node port address in IPv6 config",
			ruleset.Config{Family: v1.IPv6Protocol, NodePortAddresses: addrs("198.18.0.1")},
			"NodePort address 198.18.0.1 is not a valid IPv6 address",
		},
		{
			"invalid node port address",
			ruleset.Config{Family: v1.IPv4Protocol, NodePortAddresses: []netip.Addr{{}}},
			"NodePort address invalid IP is not a valid IPv4 address",
		},
		{
			"zoned node port address",
			ruleset.Config{Family: v1.IPv6Protocol, NodePortAddresses: addrs("fe80::1%eth0")},
			"NodePort address fe80::1%eth0 is not a valid IPv6 address",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			_, nbErr := ruleset.NewBuilder(tt.cfg)
			if tt.wantErr == "" {
				if err != nil || nbErr != nil {
					t.Fatalf("Validate() = %v, NewBuilder() error = %v; want both nil", err, nbErr)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
			if nbErr == nil || !strings.Contains(nbErr.Error(), tt.wantErr) {
				t.Fatalf("NewBuilder() error = %v, want an error containing %q", nbErr, tt.wantErr)
			}
		})
	}
}

func TestConfigMark(t *testing.T) {
	for _, tt := range []struct{ mark, want uint32 }{
		{0, 0x4000},
		{0x4000, 0x4000},
		{1 << 20, 1 << 20},
	} {
		cfg := ruleset.Config{Family: v1.IPv4Protocol, MasqueradeMark: tt.mark}
		if got := cfg.Mark(); got != tt.want {
			t.Errorf("Mark() with MasqueradeMark %#x = %#x, want %#x", tt.mark, got, tt.want)
		}
	}
}

// NewBuilder copies the Config's slices: changing them afterwards changes
// nothing in the Builder nor in the Rulesets it builds.
func TestNewBuilderCopiesConfig(t *testing.T) {
	cfg := v4Config(func(c *ruleset.Config) {
		c.RestrictExternalIPs = true
		c.AllowedExternalIPs = pfx("198.19.100.0/24")
		c.ClusterCIDRs = pfx("198.18.0.0/16")
	})
	b, err := ruleset.NewBuilder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AllowedExternalIPs[0] = netip.MustParsePrefix("0.0.0.0/0")
	cfg.ClusterCIDRs[0] = netip.MustParsePrefix("0.0.0.0/0")
	ss, es := snapshots(t, v1.IPv4Protocol, []*v1.Service{service("ns", "web", "198.19.0.10", externalIPs("203.0.113.5"))}, nil)
	rs, warnings := b.Build(ss, es)
	s, _ := rs.Service(webPort("ns", "web"))
	if len(s.ExternalIPs) != 0 || len(warnings) != 1 {
		t.Errorf("after changing the caller's Config: ExternalIPs %v, warnings %v; want none served and one warning", s.ExternalIPs, warnings)
	}
	if got := rs.Config().ClusterCIDRs; !cmp.Equal(got, pfx("198.18.0.0/16"), cmpOpts) {
		t.Errorf("Ruleset's ClusterCIDRs = %v, want 198.18.0.0/16", got)
	}
	// Nor does changing what Config returns change the Ruleset.
	rs.Config().ClusterCIDRs[0] = netip.MustParsePrefix("0.0.0.0/0")
	if got := rs.Config().ClusterCIDRs; !cmp.Equal(got, pfx("198.18.0.0/16"), cmpOpts) {
		t.Errorf("after changing the result of Config(), the Ruleset's ClusterCIDRs = %v, want 198.18.0.0/16", got)
	}
}

// A Service holds its snapshot's ServicePort, unless Config changes it:
// then a copy, and the snapshot's is left as it was.
func TestServicePortIsTheSnapshotsUnlessChanged(t *testing.T) {
	b, err := ruleset.NewBuilder(v4Config(func(c *ruleset.Config) {
		c.RestrictExternalIPs = true
		c.AllowedExternalIPs = pfx("198.19.100.0/24")
	}))
	if err != nil {
		t.Fatal(err)
	}
	ss, es := snapshots(t, v1.IPv4Protocol, []*v1.Service{
		service("ns", "plain", "198.19.0.10", externalIPs("198.19.100.1")),
		service("ns", "some", "198.19.0.11", externalIPs("198.19.100.2", "203.0.113.5")),
		service("ns", "none", "198.19.0.12", externalIPs("203.0.113.6"), eTPLocal),
		// Local from the Service as a whole, with no IPv4 external frontend.
		service("ns", "other", "198.19.0.13", externalIPs("2001:db8::6"), eTPLocal),
	}, nil)
	rs, ws := b.Build(ss, es)
	var got []string
	for _, w := range ws {
		got = append(got, w.String())
	}
	if diff := cmp.Diff([]string{
		"Service ns/none: externalIP 203.0.113.6 is not allowed: not served",
		"Service ns/some: externalIP 203.0.113.5 is not allowed: not served",
	}, got); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		name    string
		shared  bool
		ips     []string // the Service's ExternalIPs
		snapIPs []string // the snapshot's, unchanged
		local   bool     // the Service's ExternalPolicyLocal; the snapshot's is unchanged
	}{
		{"plain", true, []string{"198.19.100.1"}, []string{"198.19.100.1"}, false},
		{"some", false, []string{"198.19.100.2"}, []string{"198.19.100.2", "203.0.113.5"}, false},
		{"none", false, nil, []string{"203.0.113.6"}, false},
		{"other", false, nil, nil, false},
	} {
		s, ok := rs.Service(webPort("ns", tc.name))
		sp, _ := ss.Get(webPort("ns", tc.name))
		if !ok {
			t.Fatalf("%s: no Service", tc.name)
		}
		if shared := s.ServicePort == &ss.Service("ns", tc.name)[0]; shared != tc.shared {
			t.Errorf("%s: holds the snapshot's ServicePort %v, want %v", tc.name, shared, tc.shared)
		}
		if got := fmt.Sprint(s.ExternalIPs); got != fmt.Sprint(addrs(tc.ips...)) {
			t.Errorf("%s: ExternalIPs %s, want %v", tc.name, got, tc.ips)
		}
		if got := fmt.Sprint(sp.ExternalIPs); got != fmt.Sprint(addrs(tc.snapIPs...)) {
			t.Errorf("%s: the snapshot's ExternalIPs %s, want %v", tc.name, got, tc.snapIPs)
		}
		if s.ExternalPolicyLocal != tc.local {
			t.Errorf("%s: ExternalPolicyLocal %v, want %v", tc.name, s.ExternalPolicyLocal, tc.local)
		}
	}
	for _, name := range []string{"none", "other"} {
		if sp, _ := ss.Get(webPort("ns", name)); !sp.ExternalPolicyLocal {
			t.Errorf("%s: the snapshot's ExternalPolicyLocal was cleared", name)
		}
	}
}

// Endpoints used by the route tests. node-a is this node (zone z1).
var (
	a1 = ep{ip: "198.18.1.1", node: "node-a", zone: "z1"}
	a2 = ep{ip: "198.18.1.2", node: "node-a", zone: "z1"}
	aT = ep{ip: "198.18.1.9", node: "node-a", zone: "z1", state: "terminating"}
	aG = ep{ip: "198.18.1.8", node: "node-a", zone: "z1", state: "gone"}
	b1 = ep{ip: "198.18.2.1", node: "node-b", zone: "z2"}
	b2 = ep{ip: "198.18.2.2", node: "node-b", zone: "z2"}
	bT = ep{ip: "198.18.2.9", node: "node-b", zone: "z2", state: "terminating"}
	bG = ep{ip: "198.18.2.8", node: "node-b", zone: "z2", state: "gone"}
	bU = ep{ip: "198.18.2.7", node: "node-b", zone: "z2", state: "unready"}
	c1 = ep{ip: "198.18.3.1", node: "node-c", zone: "z1"}
)
