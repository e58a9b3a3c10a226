package ruleset_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
)

func TestRestrictExternalIPs(t *testing.T) {
	const ip = "198.19.0.10"
	restrict := func(allowed ...string) ruleset.Config {
		return v4Config(func(c *ruleset.Config) {
			c.RestrictExternalIPs = true
			c.AllowedExternalIPs = pfx(allowed...)
		})
	}
	tests := []struct {
		name         string
		svc          *v1.Service
		eps          []ep
		cfg          ruleset.Config
		want         summary
		wantWarnings []string // reasons
	}{{
		name: "unrestricted: every externalIP served",
		svc:  service("ns", "web", ip, externalIPs("203.0.113.5", "198.19.100.1")),
		eps:  []ep{b1},
		cfg:  v4Config(func(c *ruleset.Config) { c.AllowedExternalIPs = pfx("198.19.100.0/24") }),
		want: summary{
			Internal: "cluster", External: "cluster",
			Cluster: []string{"198.18.2.1:8080 r1"}, Endpoints: []string{"198.18.2.1:8080"},
			ExternalIPs: []string{"198.19.100.1", "203.0.113.5"},
		},
	}, {
		name: "allowed kept, others dropped with a warning",
		svc:  service("ns", "web", ip, externalIPs("203.0.113.5", "198.19.100.1", "198.19.101.1", "198.19.100.7")),
		eps:  []ep{b1},
		cfg:  restrict("198.19.100.0/24", "192.0.2.0/24"),
		want: summary{
			Internal: "cluster", External: "cluster",
			Cluster: []string{"198.18.2.1:8080 r1"}, Endpoints: []string{"198.18.2.1:8080"},
			ExternalIPs: []string{"198.19.100.1", "198.19.100.7"},
		},
		wantWarnings: []string{
			"externalIP 198.19.101.1 is not allowed: not served",
			"externalIP 203.0.113.5 is not allowed: not served",
		},
	}, {
		name: "nothing allowed",
		svc:  service("ns", "web", ip, nodePort, externalIPs("198.19.100.1")),
		eps:  []ep{b1},
		cfg:  restrict(),
		want: summary{
			Internal: "cluster", External: "cluster",
			Cluster: []string{"198.18.2.1:8080 r1"}, Endpoints: []string{"198.18.2.1:8080"},
		},
		wantWarnings: []string{"externalIP 198.19.100.1 is not allowed: not served"},
	}, {
		name: "eTP Local ClusterIP whose only externalIPs were dropped is not externally accessible",
		svc:  service("ns", "web", ip, eTPLocal, externalIPs("203.0.113.5")),
		eps:  []ep{a1, b1},
		cfg:  restrict("198.19.100.0/24"),
		want: summary{
			Internal: "cluster", External: "none",
			Cluster:   []string{"198.18.1.1:8080 r2 local", "198.18.2.1:8080 r1"},
			Endpoints: []string{"198.18.1.1:8080", "198.18.2.1:8080"},
		},
		wantWarnings: []string{"externalIP 203.0.113.5 is not allowed: not served"},
	}, {
		name: "eTP Local ClusterIP with an allowed externalIP stays Local",
		svc:  service("ns", "web", ip, eTPLocal, externalIPs("203.0.113.5", "198.19.100.1")),
		eps:  []ep{b1},
		cfg:  restrict("198.19.100.0/24"),
		want: summary{
			Internal: "cluster", External: "drop",
			Cluster: []string{"198.18.2.1:8080 r1"}, Endpoints: []string{"198.18.2.1:8080"},
			ExternalIPs: []string{"198.19.100.1"}, ExternalPolicyLocal: true,
		},
		wantWarnings: []string{"externalIP 203.0.113.5 is not allowed: not served"},
	}, {
		name: "eTP Local NodePort whose externalIPs were dropped keeps its NodePort",
		svc:  service("ns", "web", ip, nodePort, eTPLocal, externalIPs("203.0.113.5")),
		eps:  []ep{a1},
		cfg:  restrict("198.19.100.0/24"),
		want: summary{
			Internal: "cluster", External: "local",
			Cluster: []string{"198.18.1.1:8080 r1 local"}, Local: []string{"198.18.1.1:8080 r1 local"},
			Endpoints: []string{"198.18.1.1:8080"}, ExternalPolicyLocal: true,
		},
		wantWarnings: []string{"externalIP 203.0.113.5 is not allowed: not served"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, warnings := buildWarned(t, tt.cfg, []*v1.Service{tt.svc}, []*discovery.EndpointSlice{endpointSlice("ns", "web", "web-1", tt.eps...)})
			s, ok := rs.Service(webPort("ns", "web"))
			if !ok {
				t.Fatalf("Service ns/web:http missing from %v", rs.Services())
			}
			if diff := cmp.Diff(tt.want, summarize(s)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			var want []svcproxy.Warning
			for _, r := range tt.wantWarnings {
				want = append(want, svcproxy.Warning{Kind: "Service", Namespace: "ns", Name: "web", Reason: r})
			}
			if diff := cmp.Diff(want, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// The restricted ExternalIPs are the Service's own: the snapshot's
// ServicePort keeps every externalIP.
func TestRestrictExternalIPsLeavesSnapshotAlone(t *testing.T) {
	cfg := v4Config(func(c *ruleset.Config) { c.RestrictExternalIPs = true })
	b, err := ruleset.NewBuilder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ss, es := snapshots(t, v1.IPv4Protocol, []*v1.Service{service("ns", "web", "198.19.0.10", externalIPs("203.0.113.5"))}, nil)
	if _, ws := b.Build(ss, es); len(ws) != 1 || !strings.Contains(ws[0].Reason, "externalIP 203.0.113.5 is not allowed") {
		t.Errorf("warnings %v, want one about 203.0.113.5", ws)
	}
	sp, _ := ss.Get(webPort("ns", "web"))
	if diff := cmp.Diff(addrs("203.0.113.5"), sp.ExternalIPs, cmpOpts); diff != "" {
		t.Errorf("snapshot's ExternalIPs changed (-want +got):\n%s", diff)
	}
}
