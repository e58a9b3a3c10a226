//go:build linux

package iptables

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/servicemap"
)

// TestKernelLargeCluster: in a fresh namespace, an Executor syncs 1000
// endpoints, then, partially, 1003 (large-cluster mode): the kernel takes
// both; iptables-save shows the endpoint rules of the Service port the
// partial sync wrote without comments and those of the one it did not
// with theirs; the deep check finds nothing in that mixed state and finds
// a rule deleted from an endpoint chain; the full sync that repairs it
// leaves no comment on any endpoint rule. In either family.
func TestKernelLargeCluster(t *testing.T) {
	netns.Require(t, kernelTools...)
	lab := netns.NewLab(t)
	ctx := context.Background()
	web := servicemap.PortName{Namespace: "ns1", Name: "web", Port: "p80", Protocol: v1.ProtocolTCP}
	api := servicemap.PortName{Namespace: "ns2", Name: "api", Port: "p80", Protocol: v1.ProtocolTCP}
	for _, v6 := range []bool{false, true} {
		family, addr, apiIP := v1.IPv4Protocol, "198.18.64.2", "198.19.0.12"
		if v6 {
			family, addr, apiIP = v1.IPv6Protocol, "2001:db8:18:40::2", "2001:db8:19::12"
		}
		ns := lab.NewNS(map[bool]string{false: "large4", true: "large6"}[v6])
		e, err := NewExecutor(ExecutorConfig{Family: family, Runner: nsRunner(ns)})
		if err != nil {
			t.Fatal(err)
		}
		cfg := familyConfig(v6)
		small := build(t, cfg, largeClusterObjects(v6, 0)...)
		large := build(t, cfg, append(largeClusterObjects(v6, 1),
			service("ns2", "api", apiIP),
			slice("ns2", "api", "api-1", 8080, v1.ProtocolTCP, readyEPs(2, v6)...))...)
		if _, err := e.Apply(ctx, small); err != nil {
			t.Fatal(err)
		}
		if res, err := e.Apply(ctx, large); err != nil || res.Full {
			t.Fatalf("%s: Sync into large-cluster mode: %+v, %v; want a partial one", family, res, err)
		}
		ep := netip.AddrPortFrom(netip.MustParseAddr(addr), 8080)
		webSEP, apiSEP := e.names.EndpointChain(web, ep), e.names.EndpointChain(api, ep)
		saved := saveNAT(t, ns, v6)
		for chain, commented := range map[string]bool{webSEP: true, apiSEP: false} {
			rules := chainRules(saved, chain)
			if len(rules) != 2 {
				t.Fatalf("%s: chain %s in the kernel: %q, want 2 rules", family, chain, rules)
			}
			for _, r := range rules {
				if strings.Contains(r, "--comment") != commented {
					t.Errorf("%s: %s: comment %v, want %v", family, r, !commented, commented)
				}
			}
		}
		e.deepDue = time.Time{}
		if d, err := e.CheckState(ctx); d.Found() || err != nil {
			t.Errorf("%s: CheckState after the partial sync: %+v, %v; want nothing", family, d, err)
		}
		tool := map[bool]string{false: "iptables", true: "ip6tables"}[v6]
		if _, err := ns.Run(ctx, tool, "-w", "-t", "nat", "-D", apiSEP, "2"); err != nil {
			t.Fatal(err)
		}
		e.deepDue = time.Time{}
		if d, err := e.CheckState(ctx); !strings.Contains(d.What, apiSEP+" has 1 rules, want 2") || err != nil {
			t.Errorf("%s: CheckState with api's DNAT rule deleted: %+v, %v", family, d, err)
		}
		e.RequestFullSync()
		if _, err := e.Apply(ctx, large); err != nil {
			t.Fatal(err)
		}
		saved = saveNAT(t, ns, v6)
		if rules, commented := endpointComments(e.names, saved); rules < 3000 || commented != 0 {
			t.Errorf("%s: after the full sync, %d of %d endpoint rules in the kernel commented, want none", family, commented, rules)
		}
		e.deepDue = time.Time{}
		if d, err := e.CheckState(ctx); d.Found() || err != nil {
			t.Errorf("%s: CheckState after the full sync: %+v, %v; want nothing", family, d, err)
		}
		if err := e.Cleanup(ctx); err != nil {
			t.Fatalf("%s: Cleanup: %v", family, err)
		}
	}
}

// saveNAT is the nat table as iptables-save prints it in ns.
func saveNAT(t *testing.T, ns *netns.NS, v6 bool) string {
	t.Helper()
	out, err := ns.Run(context.Background(), map[bool]string{false: "iptables-save", true: "ip6tables-save"}[v6], "-t", "nat")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// chainRules are the rules of chain in saved.
func chainRules(saved, chain string) []string {
	var rules []string
	for _, line := range strings.Split(saved, "\n") {
		if strings.HasPrefix(line, "-A "+chain+" ") {
			rules = append(rules, line)
		}
	}
	return rules
}
