//go:build linux

package flat_test

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/ruleset"
)

// affinityWorld is n Services × 10 endpoints, every tenth with ClientIP
// affinity (10800 s, when withAffinity), svc00000 (affinity) and svc00001
// (none) on the cluster's first two pods, the others on addresses that
// answer nothing.
func affinityWorld(b *testing.B, c *netns.Cluster, n int, withAffinity bool) (*world, func(i int) []ep) {
	cfg := config4()
	cfg.ClusterCIDRs = []netip.Prefix{netns.PodCIDR4}
	w := newWorld(b, cfg)
	endpoints := func(i int) []ep {
		if i < 2 {
			return []ep{{ip: c.Pods[0].IPv4.String(), node: node}, {ip: c.Pods[1].IPv4.String(), node: node}}
		}
		var eps []ep
		for j := range 10 {
			eps = append(eps, ep{ip: fmt.Sprintf("198.18.%d.%d", 96+(i*10+j)/250%32, (i*10+j)%250+2), node: node})
		}
		return eps
	}
	for i := range n {
		name := fmt.Sprintf("svc%05d", i)
		var mods []func(*v1.Service)
		if withAffinity && i%10 == 0 {
			mods = append(mods, affinity(10800))
		}
		w.add(svc("bench", name, fmt.Sprintf("198.19.%d.%d", i/250, i%250+1), mods...), slice("bench", name, 8080, endpoints(i)...))
	}
	return w, endpoints
}

// hybridAffinity is the other design the issue allows, for one Service of
// affinityWorld: kube-proxy's chains for its affinity (a chain per Service
// port, one per endpoint with its own set of clients) reached from the
// flat layout through a verdict map.
func hybridAffinity(i int, eps []ep) string {
	var b strings.Builder
	svcChain := fmt.Sprintf("aff-svc%05d", i)
	fam := "ip " + flat.DefaultTable
	fmt.Fprintf(&b, "add chain %s %s\n", fam, svcChain)
	var vmap []string
	for j, e := range eps {
		ep := fmt.Sprintf("%s-ep%d", svcChain, j)
		fmt.Fprintf(&b, "add chain %s %s\nadd set %s %s { type ipv4_addr ; flags dynamic,timeout ; timeout 3h ; }\n", fam, ep, fam, ep)
		fmt.Fprintf(&b, "add rule %s %s ip saddr @%s goto %s\n", fam, svcChain, ep, ep)
		fmt.Fprintf(&b, "add rule %s %s meta l4proto tcp update @%s { ip saddr } dnat to %s:8080\n", fam, ep, ep, e.ip)
		vmap = append(vmap, fmt.Sprintf("%d : goto %s", j, ep))
	}
	fmt.Fprintf(&b, "add rule %s %s numgen random mod %d vmap { %s }\n", fam, svcChain, len(eps), strings.Join(vmap, ", "))
	fmt.Fprintf(&b, "add element %s affinity-services { 198.19.%d.%d . tcp . 80 : goto %s }\n", fam, i/250, i%250+1, svcChain)
	return b.String()
}

// hybridRemoval deletes what hybridAffinity adds.
func hybridRemoval(i int, n int) string {
	var b strings.Builder
	svcChain := fmt.Sprintf("aff-svc%05d", i)
	fam := "ip " + flat.DefaultTable
	fmt.Fprintf(&b, "delete element %s affinity-services { 198.19.%d.%d . tcp . 80 }\nflush chain %s %s\ndelete chain %s %s\n", fam, i/250, i%250+1, fam, svcChain, fam, svcChain)
	for j := range n {
		ep := fmt.Sprintf("%s-ep%d", svcChain, j)
		fmt.Fprintf(&b, "flush chain %s %s\ndelete chain %s %s\ndelete set %s %s\n", fam, ep, fam, ep, fam, ep)
	}
	return b.String()
}

// BenchmarkKernelFlatAffinity measures ClientIP affinity in a flat table of
// n Services × 10 endpoints (1,000 and 10,000, or SVCPROXY_AFFINITY_N,
// comma-separated), 10 % with affinity, in the two designs the
// issue allows:
//
//   - flat/…: this package's (a dynamic map per protocol, elements only);
//     change: one affinity Service's endpoint replaced and put back over
//     netlink (two transactions per op, as the Executor sends them);
//     add-nft: one affinity Service's elements added and deleted through
//     `nft -f` (two runs of nft per op);
//   - chains/…: kube-proxy's chains per affinity Service reached through a
//     verdict map, the same Services; add-nft: one affinity Service's
//     chains, sets, rules and verdict-map element added and deleted
//     through `nft -f`;
//   - …/connect-affinity, …/connect-plain, pod: one TCP connection from a
//     client to an affinity Service (the client has an entry), to a
//     Service without affinity, to a pod directly.
func BenchmarkKernelFlatAffinity(b *testing.B) {
	netns.Require(b, "nft")
	c := netns.NewCluster(b, netns.ClusterSpec{Pods: 2, Clients: 1})
	c.StartEcho(8080)
	nft := c.Node.ToolOnPath(b, "nft")
	sizes := []int{1000, 10000}
	if env := os.Getenv("SVCPROXY_AFFINITY_N"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatalf("SVCPROXY_AFFINITY_N: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		benchFlatAffinity(b, c, nft, n)
		benchHybridAffinity(b, c, nft, n)
	}
}

func benchFlatAffinity(b *testing.B, c *netns.Cluster, nft string, n int) {
	w, endpoints := affinityWorld(b, c, n, true)
	rs := w.build()
	st, script, res := flat.Script(rs, flat.Options{})
	if len(res.Warnings) > 0 {
		b.Fatalf("warnings: %v", res.Warnings[0])
	}
	runScript(b, c.Node.NS, nft, script)
	changed := func(i int) *ruleset.Ruleset {
		eps := endpoints(i)
		eps[0].ip = "198.18.127.250"
		w.add(slice("bench", fmt.Sprintf("svc%05d", i), 8080, eps...))
		return w.update(rs)
	}
	target := 10 * (n / 20) // an affinity Service in the middle
	next := changed(target)
	w.add(slice("bench", fmt.Sprintf("svc%05d", target), 8080, endpoints(target)...))
	b.Run(fmt.Sprintf("flat/change/%d", n), func(b *testing.B) {
		var nl *flat.Netlink
		if err := c.Node.Do(func() (err error) { nl, err = flat.DialNetlink(); return err }); err != nil {
			b.Fatal(err)
		}
		defer nl.Close()
		fake := knftables.NewFake(knftables.IPv4Family, flat.DefaultTable)
		for b.Loop() {
			for _, step := range [][2]*ruleset.Ruleset{{rs, next}, {next, rs}} {
				ch, err := flat.RenderChanges(fake.NewTransaction(), st, step[0], step[1])
				if err != nil || !ch.ElementsOnly {
					b.Fatalf("err %v, elements only %v", err, ch.ElementsOnly)
				}
				if err := nl.Apply(ch); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	add, del := flatAffinityElements(b, rs, target)
	b.Run(fmt.Sprintf("flat/add-nft/%d", n), func(b *testing.B) {
		for b.Loop() {
			runScript(b, c.Node.NS, nft, del)
			runScript(b, c.Node.NS, nft, add)
		}
	})
	benchConnects(b, c, fmt.Sprintf("flat/%d", n))
	runScript(b, c.Node.NS, nft, "delete table ip "+flat.DefaultTable+"\n")
}

// flatAffinityElements are the `add element` and `delete element` lines of
// Service i of rs's flat table.
func flatAffinityElements(b *testing.B, rs *ruleset.Ruleset, i int) (add, del string) {
	name := fmt.Sprintf("bench/svc%05d:p80/TCP", i)
	fake := knftables.NewFake(knftables.IPv4Family, flat.DefaultTable)
	tx := fake.NewTransaction()
	flat.Render(tx, rs, flat.Options{})
	var adds, dels []string
	for _, line := range strings.Split(tx.String(), "\n") {
		if strings.HasPrefix(line, "add element ") && strings.Contains(line, `"`+name+`"`) {
			adds = append(adds, line)
			dels = append(dels, "delete"+strings.TrimPrefix(line, "add"))
		}
	}
	if len(adds) == 0 {
		b.Fatalf("no elements of %s", name)
	}
	return strings.Join(adds, "\n") + "\n", strings.Join(dels, "\n") + "\n"
}

func benchHybridAffinity(b *testing.B, c *netns.Cluster, nft string, n int) {
	w, endpoints := affinityWorld(b, c, n, false)
	_, script, _ := flat.Script(w.build(), flat.Options{})
	var hybrid strings.Builder
	fam := "ip " + flat.DefaultTable
	fmt.Fprintf(&hybrid, "add map %s affinity-services { type ipv4_addr . inet_proto . inet_service : verdict ; }\n", fam)
	fmt.Fprintf(&hybrid, "insert rule %s cluster ip daddr . meta l4proto . th dport vmap @affinity-services\n", fam)
	target := 10 * (n / 20)
	for i := 0; i < n; i += 10 {
		if i != target {
			hybrid.WriteString(hybridAffinity(i, endpoints(i)))
		}
	}
	runScript(b, c.Node.NS, nft, script+hybrid.String())
	add, del := hybridAffinity(target, endpoints(target)), hybridRemoval(target, len(endpoints(target)))
	runScript(b, c.Node.NS, nft, add)
	b.Run(fmt.Sprintf("chains/add-nft/%d", n), func(b *testing.B) {
		for b.Loop() {
			runScript(b, c.Node.NS, nft, del)
			runScript(b, c.Node.NS, nft, add)
		}
	})
	benchConnects(b, c, fmt.Sprintf("chains/%d", n))
	runScript(b, c.Node.NS, nft, "delete table ip "+flat.DefaultTable+"\n")
}

// benchConnects measures one TCP connection to svc00000 (affinity), to
// svc00001 (none) and to a pod directly.
func benchConnects(b *testing.B, c *netns.Cluster, prefix string) {
	for _, d := range []struct {
		name string
		dst  netip.AddrPort
	}{
		{"connect-affinity", netip.MustParseAddrPort("198.19.0.1:80")},
		{"connect-plain", netip.MustParseAddrPort("198.19.0.2:80")},
		{"connect-pod", netip.AddrPortFrom(c.Pods[0].IPv4, 8080)},
	} {
		b.Run(prefix+"/"+d.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.Clients[0].TCP(d.dst, 2*time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
