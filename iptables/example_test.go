package iptables_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// web returns a Ruleset holding ns1/web (cluster IP 198.19.0.10, port 80)
// with the given endpoints on port 8080.
func web(eps ...string) *ruleset.Ruleset {
	must := warnings.Must(warnings.Example)
	svcs := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	must.Used(svcs.Update(&v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web"},
		Spec: v1.ServiceSpec{
			ClusterIP: "198.19.0.10", ClusterIPs: []string{"198.19.0.10"},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}))
	slices := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	es := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns1", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
	}
	for _, ip := range eps {
		es.Endpoints = append(es.Endpoints, discovery.Endpoint{Addresses: []string{ip}})
	}
	must.Used(slices.Update(es))

	b, err := ruleset.NewBuilder(ruleset.Config{
		Family:       v1.IPv4Protocol,
		Node:         topology.Node{Name: "node-a"},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/18")},
	})
	if err != nil {
		panic(err)
	}
	s, _ := svcs.Snapshot()
	e, _ := slices.Snapshot()
	rs, ws := b.Build(s, e)
	must.None(ws)
	return rs
}

func ptr[T any](v T) *T { return &v }

func ExampleRender() {
	rs := web("198.18.64.2", "198.18.65.2")
	fmt.Print(string(iptables.Render(iptables.DefaultNames(), rs)))
	// Output:
	// *filter
	// # -S lists the table first: it keeps the iptables-nft --noflush restore linear (see package iptables)
	// -S
	// :KUBE-SERVICES - [0:0]
	// :KUBE-EXTERNAL-SERVICES - [0:0]
	// :KUBE-FORWARD - [0:0]
	// :KUBE-NODEPORTS - [0:0]
	// :KUBE-PROXY-FIREWALL - [0:0]
	// :KUBE-FIREWALL - [0:0]
	// -A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
	// -A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
	// -A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
	// COMMIT
	// *nat
	// # -S lists the table first: it keeps the iptables-nft --noflush restore linear (see package iptables)
	// -S
	// :KUBE-SERVICES - [0:0]
	// :KUBE-NODEPORTS - [0:0]
	// :KUBE-POSTROUTING - [0:0]
	// :KUBE-MARK-MASQ - [0:0]
	// :KUBE-SVC-4LVCYZMTA5CQO6SX - [0:0]
	// :KUBE-SEP-HCB4KAC5HQBEUF5X - [0:0]
	// :KUBE-SEP-GYOA7GCRXHSSBJB3 - [0:0]
	// -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
	// -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
	// -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
	// -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
	// -A KUBE-SERVICES -m comment --comment "ns1/web:http cluster IP" -m tcp -p tcp -d 198.19.0.10 --dport 80 -j KUBE-SVC-4LVCYZMTA5CQO6SX
	// -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KUBE-NODEPORTS
	// -A KUBE-SVC-4LVCYZMTA5CQO6SX -m comment --comment "ns1/web:http cluster IP" -m tcp -p tcp -d 198.19.0.10 --dport 80 ! -s 198.18.64.0/18 -j KUBE-MARK-MASQ
	// -A KUBE-SVC-4LVCYZMTA5CQO6SX -m comment --comment "ns1/web:http -> 198.18.64.2:8080" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-HCB4KAC5HQBEUF5X
	// -A KUBE-SVC-4LVCYZMTA5CQO6SX -m comment --comment "ns1/web:http -> 198.18.65.2:8080" -j KUBE-SEP-GYOA7GCRXHSSBJB3
	// -A KUBE-SEP-HCB4KAC5HQBEUF5X -m comment --comment ns1/web:http -s 198.18.64.2 -j KUBE-MARK-MASQ
	// -A KUBE-SEP-HCB4KAC5HQBEUF5X -m comment --comment ns1/web:http -m tcp -p tcp -j DNAT --to-destination 198.18.64.2:8080
	// -A KUBE-SEP-GYOA7GCRXHSSBJB3 -m comment --comment ns1/web:http -s 198.18.65.2 -j KUBE-MARK-MASQ
	// -A KUBE-SEP-GYOA7GCRXHSSBJB3 -m comment --comment ns1/web:http -m tcp -p tcp -j DNAT --to-destination 198.18.65.2:8080
	// COMMIT
}

// A partial render rewrites the top-level chains and only the chains of the
// ServicePorts that changed; chains no longer used are flushed and deleted.
func ExampleRenderPartial() {
	before := web("198.18.64.2", "198.18.65.2")
	after := web("198.18.64.2")
	text, err := iptables.RenderPartial(iptables.DefaultNames(), before, after, ruleset.Diff(before, after))
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(string(text), "\n") {
		if strings.Contains(line, "KUBE-SVC-") || strings.Contains(line, "KUBE-SEP-") {
			fmt.Println(line)
		}
	}
	// Output:
	// :KUBE-SVC-4LVCYZMTA5CQO6SX - [0:0]
	// :KUBE-SEP-HCB4KAC5HQBEUF5X - [0:0]
	// :KUBE-SEP-GYOA7GCRXHSSBJB3 - [0:0]
	// -A KUBE-SERVICES -m comment --comment "ns1/web:http cluster IP" -m tcp -p tcp -d 198.19.0.10 --dport 80 -j KUBE-SVC-4LVCYZMTA5CQO6SX
	// -A KUBE-SVC-4LVCYZMTA5CQO6SX -m comment --comment "ns1/web:http cluster IP" -m tcp -p tcp -d 198.19.0.10 --dport 80 ! -s 198.18.64.0/18 -j KUBE-MARK-MASQ
	// -A KUBE-SVC-4LVCYZMTA5CQO6SX -m comment --comment "ns1/web:http -> 198.18.64.2:8080" -j KUBE-SEP-HCB4KAC5HQBEUF5X
	// -A KUBE-SEP-HCB4KAC5HQBEUF5X -m comment --comment ns1/web:http -s 198.18.64.2 -j KUBE-MARK-MASQ
	// -A KUBE-SEP-HCB4KAC5HQBEUF5X -m comment --comment ns1/web:http -m tcp -p tcp -j DNAT --to-destination 198.18.64.2:8080
	// -X KUBE-SEP-GYOA7GCRXHSSBJB3
}

// printRunner prints the commands instead of running them (a test double;
// iptables.ExecRunner runs them, optionally under a prefix such as
// `ip netns exec NAME`).
type printRunner struct{}

func (printRunner) Run(_ context.Context, c iptables.Command) error {
	fmt.Printf("%s (%d bytes in)\n", c, len(c.Stdin))
	if len(c.Args) > 3 && c.Args[3] == "-C" {
		// "iptables -C" exits 1 when the rule is missing.
		return &iptables.CommandError{Command: c.String(), ExitCode: 1, Err: fmt.Errorf("exit status 1")}
	}
	return nil
}

// An Executor's first sync is full and installs the jumps from the built-in
// chains; later ones first check, with one restore of "-C" lines, that the
// jumps and the Canary rules are still there, then are partial (or full,
// with the Fallback of its SyncDetails saying why, when something was
// missing).
func ExampleExecutor() {
	e, err := iptables.NewExecutor(iptables.ExecutorConfig{Family: v1.IPv4Protocol, Runner: printRunner{}})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, err := e.Apply(ctx, web("198.18.64.2", "198.18.65.2"))
	fmt.Println("full:", res.Full, err)
	res, err = e.Apply(ctx, web("198.18.64.2"))
	details := res
	fmt.Printf("full: %v changed: %v fallback: %q %v\n", res.Full, details.Changes.Changed, details.Fallback, err)
	// Output:
	// iptables-restore --noflush --counters -w (2422 bytes in)
	// iptables -w -t filter -C INPUT -m conntrack --ctstate NEW -m comment --comment kubernetes externally-visible service portals -j KUBE-EXTERNAL-SERVICES (0 bytes in)
	// iptables -w -t filter -I INPUT -m conntrack --ctstate NEW -m comment --comment kubernetes externally-visible service portals -j KUBE-EXTERNAL-SERVICES (0 bytes in)
	// iptables -w -t filter -C FORWARD -m conntrack --ctstate NEW -m comment --comment kubernetes externally-visible service portals -j KUBE-EXTERNAL-SERVICES (0 bytes in)
	// iptables -w -t filter -I FORWARD -m conntrack --ctstate NEW -m comment --comment kubernetes externally-visible service portals -j KUBE-EXTERNAL-SERVICES (0 bytes in)
	// iptables -w -t filter -C INPUT -m comment --comment kubernetes health check service ports -j KUBE-NODEPORTS (0 bytes in)
	// iptables -w -t filter -I INPUT -m comment --comment kubernetes health check service ports -j KUBE-NODEPORTS (0 bytes in)
	// iptables -w -t filter -C FORWARD -m conntrack --ctstate NEW -m comment --comment kubernetes service portals -j KUBE-SERVICES (0 bytes in)
	// iptables -w -t filter -I FORWARD -m conntrack --ctstate NEW -m comment --comment kubernetes service portals -j KUBE-SERVICES (0 bytes in)
	// iptables -w -t filter -C OUTPUT -m conntrack --ctstate NEW -m comment --comment kubernetes service portals -j KUBE-SERVICES (0 bytes in)
	// iptables -w -t filter -I OUTPUT -m conntrack --ctstate NEW -m comment --comment kubernetes service portals -j KUBE-SERVICES (0 bytes in)
	// iptables -w -t filter -C FORWARD -m comment --comment kubernetes forwarding rules -j KUBE-FORWARD (0 bytes in)
	// iptables -w -t filter -I FORWARD -m comment --comment kubernetes forwarding rules -j KUBE-FORWARD (0 bytes in)
	// iptables -w -t filter -C INPUT -m conntrack --ctstate NEW -m comment --comment kubernetes load balancer firewall -j KUBE-PROXY-FIREWALL (0 bytes in)
	// iptables -w -t filter -I INPUT -m conntrack --ctstate NEW -m comment --comment kubernetes load balancer firewall -j KUBE-PROXY-FIREWALL (0 bytes in)
	// iptables -w -t filter -C OUTPUT -m conntrack --ctstate NEW -m comment --comment kubernetes load balancer firewall -j KUBE-PROXY-FIREWALL (0 bytes in)
	// iptables -w -t filter -I OUTPUT -m conntrack --ctstate NEW -m comment --comment kubernetes load balancer firewall -j KUBE-PROXY-FIREWALL (0 bytes in)
	// iptables -w -t filter -C FORWARD -m conntrack --ctstate NEW -m comment --comment kubernetes load balancer firewall -j KUBE-PROXY-FIREWALL (0 bytes in)
	// iptables -w -t filter -I FORWARD -m conntrack --ctstate NEW -m comment --comment kubernetes load balancer firewall -j KUBE-PROXY-FIREWALL (0 bytes in)
	// iptables -w -t filter -C INPUT -j KUBE-FIREWALL (0 bytes in)
	// iptables -w -t filter -I INPUT -j KUBE-FIREWALL (0 bytes in)
	// iptables -w -t filter -C OUTPUT -j KUBE-FIREWALL (0 bytes in)
	// iptables -w -t filter -I OUTPUT -j KUBE-FIREWALL (0 bytes in)
	// iptables -w -t nat -C OUTPUT -m comment --comment kubernetes service portals -j KUBE-SERVICES (0 bytes in)
	// iptables -w -t nat -I OUTPUT -m comment --comment kubernetes service portals -j KUBE-SERVICES (0 bytes in)
	// iptables -w -t nat -C PREROUTING -m comment --comment kubernetes service portals -j KUBE-SERVICES (0 bytes in)
	// iptables -w -t nat -I PREROUTING -m comment --comment kubernetes service portals -j KUBE-SERVICES (0 bytes in)
	// iptables -w -t nat -C POSTROUTING -m comment --comment kubernetes postrouting rules -j KUBE-POSTROUTING (0 bytes in)
	// iptables -w -t nat -I POSTROUTING -m comment --comment kubernetes postrouting rules -j KUBE-POSTROUTING (0 bytes in)
	// full: true <nil>
	// iptables-restore --noflush --counters -w (1315 bytes in)
	// iptables-restore --noflush --counters -w (1762 bytes in)
	// full: false changed: [ns1/web:http] fallback: "" <nil>
}

// ExampleRenderFor renders for a kernel that has kube-proxy's nfacct
// counters, then for one whose conntrack is liberal: the drop of INVALID
// packets in KUBE-FORWARD counts into its counter, then goes.
func ExampleRenderFor() {
	rs := web("198.18.64.2")
	for _, k := range []iptables.Kernel{
		{InvalidDroppedCounter: true, LocalhostNodePortsCounter: true},
		{TCPBeLiberal: true},
	} {
		for _, line := range strings.Split(string(iptables.RenderFor(iptables.DefaultNames(), rs, k)), "\n") {
			if strings.HasPrefix(line, "-A KUBE-FORWARD") {
				fmt.Println(line)
			}
		}
		fmt.Println("--")
	}
	// Output:
	// -A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP
	// -A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
	// -A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
	// --
	// -A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
	// -A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
	// --
}
