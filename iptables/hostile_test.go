package iptables

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// hostileService is a ServicePort whose names carry everything that could
// break out of a comment, a rule or a line. servicemap refuses such names;
// the renderer must be safe even so.
func hostileService(ns, name, port string) *ruleset.Service {
	ep := endpoints.Endpoint{Addr: netip.MustParseAddr("198.18.64.2"), Port: 8080, Ready: true, Serving: true, NodeName: testNode}
	s := &ruleset.Service{
		ServicePort: &servicemap.ServicePort{
			Name:                     servicemap.PortName{Namespace: ns, Name: name, Port: port, Protocol: v1.ProtocolTCP},
			Family:                   v1.IPv4Protocol,
			ClusterIP:                netip.MustParseAddr("198.19.0.10"),
			Port:                     80,
			NodePort:                 30080,
			ExternalIPs:              []netip.Addr{netip.MustParseAddr("198.19.100.1")},
			LoadBalancerIPs:          []netip.Addr{netip.MustParseAddr("198.19.200.1")},
			LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.32.0/19")},
			ExternalPolicyLocal:      true,
			HealthCheckNodePort:      32000,
		},
		Internal:        ruleset.RouteCluster,
		External:        ruleset.RouteLocal,
		ExternalTraffic: ruleset.ExternalTraffic{Steered: true, ShortCircuit: true},
		Endpoints:       []endpoints.Endpoint{ep},
	}
	s.ClusterTargets = []ruleset.Target{{Endpoint: ep.AddrPort(), Local: true}}
	s.LocalTargets = s.ClusterTargets
	return s
}

func TestHostileNamesCannotInject(t *testing.T) {
	hostile := []string{
		"ns\"\n-A INPUT -j ACCEPT\n#",
		"a b\" -j ACCEPT \"",
		"x\\\" ; rm -rf / '",
		"\x00\r\t\x7f\xff",
		strings.Repeat("long\"name ", 100),
		"",
	}
	benign := renderServices(t, hostileService("ns", "name", "port"))
	for _, h := range hostile {
		got := renderServices(t, hostileService(h, h, h))
		gotLines, benignLines := strings.Split(string(got), "\n"), strings.Split(string(benign), "\n")
		if len(gotLines) != len(benignLines) {
			t.Fatalf("%q: %d lines, benign names give %d:\n%s", h, len(gotLines), len(benignLines), got)
		}
		// Line by line, the hostile output has the very same tokens as
		// the benign one, except for comment texts and hashed chain
		// names: a name can add no option, rule, line or table.
		for i := range gotLines {
			g, err := maskedTokens(gotLines[i])
			if err != nil {
				t.Fatalf("%q: %v", h, err)
			}
			b, err := maskedTokens(benignLines[i])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(g, b) {
				t.Errorf("%q: line %d differs in structure:\n  %s\n  %s", h, i+1, gotLines[i], benignLines[i])
			}
		}
		if _, err := applyRestore(newModel(), got); err != nil {
			t.Errorf("%q: model rejects the output: %v", h, err)
		}
	}
}

// maskedTokens tokenizes line as iptables-restore would and replaces
// comment texts (checking their length) and per-Service chain names by
// placeholders.
func maskedTokens(line string) ([]string, error) {
	args, err := tokenize(line)
	if err != nil {
		return nil, err
	}
	names := DefaultNames()
	for i, a := range args {
		switch {
		case i > 0 && args[i-1] == "--comment":
			if len(a) > maxCommentLen {
				return nil, fmt.Errorf("comment of %d bytes in %q", len(a), line)
			}
			args[i] = "<comment>"
		case names.ownsServiceChain(strings.TrimPrefix(a, ":")):
			args[i] = "<chain>"
		}
	}
	return args, nil
}

func renderServices(t *testing.T, services ...*ruleset.Service) []byte {
	t.Helper()
	cfg := testConfig()
	r := newRenderer(Names{}, cfg)
	r.owns = func(*ruleset.Service, ruleset.Frontend) bool { return true }
	plans := r.plans(services)
	rewriteAll(plans)
	return r.render(plans, renderOptions{listTables: true})
}
