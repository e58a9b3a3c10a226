package iptables

import (
	"bytes"
	"slices"
	"strings"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Render returns the iptables-restore input (for iptables-restore with an
// IPv4 Ruleset, ip6tables-restore with an IPv6 one) that makes the filter
// and nat tables hold the rules of rs, with kube-proxy's chain structure.
// It is meant for `iptables-restore --noflush`: every chain it writes is
// declared with ":CHAIN - [0:0]", which creates or flushes it, and chains
// that are not ours are left alone. The jumps from the built-in chains and
// the Canary chains are not part of it (see Executor).
//
// Each table starts with a "-S" line, which lists the table on standard
// output. It changes nothing; it makes iptables-nft load its cache of the
// whole table at once, which keeps a full restore linear in the number of
// chains (see the package documentation), and the Executor reads the
// listing to find chains left over from earlier runs.
//
// Render is pure and deterministic: equal Rulesets give identical bytes.
// The zero Names is DefaultNames. It renders for the zero Kernel (no nfacct
// counters, INVALID packets dropped); RenderFor renders for another.
func Render(names Names, rs *ruleset.Ruleset) []byte {
	return RenderFor(names, rs, Kernel{})
}

// RenderFor is Render for a kernel k: its nfacct counters and its
// conntrack's liberal TCP tracking change rules as they change
// kube-proxy's (see Kernel).
func RenderFor(names Names, rs *ruleset.Ruleset, k Kernel) []byte {
	return renderFull(names, rs, renderOptions{listTables: true, kernel: k})
}

// renderFull is Render with opts: opts.stale nat chains (which must not be
// among rs's chains) are also flushed and deleted.
func renderFull(names Names, rs *ruleset.Ruleset, opts renderOptions) []byte {
	r := newRenderer(names, rs.Config())
	r.owns = rs.Owns
	r.largeCluster = isLargeCluster(rs)
	plans := r.plans(rs.Services())
	rewriteAll(plans)
	return r.render(plans, opts)
}

// RenderPartial returns iptables-restore --noflush input that takes the
// kernel from the state of a successful sync of old to that of new, where
// ch is ruleset.Diff(old, new): the top-level chains (KUBE-SERVICES,
// KUBE-NODEPORTS, KUBE-EXTERNAL-SERVICES, KUBE-PROXY-FIREWALL, …) are
// rewritten in full, the chains of added and changed ServicePorts are
// re-declared (which flushes them) and rewritten, and the chains of removed
// ServicePorts, and those a changed ServicePort no longer uses, are flushed
// and deleted. The chains of unchanged ServicePorts are not mentioned: when
// new is in large-cluster mode and old was not (or the reverse), the
// chains it rewrites follow new's mode and the others keep their comments
// (or their lack of them) until a full render, as kube-proxy's do.
//
// It returns svcproxy.ErrFullSyncNeeded when old is nil or ch.ConfigChanged.
// It renders for the zero Kernel, as Render does.
func RenderPartial(names Names, old, new *ruleset.Ruleset, ch ruleset.Changes) ([]byte, error) {
	return RenderPartialFor(names, old, new, ch, Kernel{})
}

// RenderPartialFor is RenderPartial for a kernel k (see RenderFor), which
// must be the one old was synced for: the rules of unchanged ServicePorts
// are not rewritten.
func RenderPartialFor(names Names, old, new *ruleset.Ruleset, ch ruleset.Changes, k Kernel) ([]byte, error) {
	return renderPartial(names, old, new, ch, renderOptions{kernel: k})
}

// renderPartial is RenderPartialFor with opts' kernel and serviceRules.
func renderPartial(names Names, old, new *ruleset.Ruleset, ch ruleset.Changes, opts renderOptions) ([]byte, error) {
	if old == nil || ch.ConfigChanged {
		return nil, svcproxy.ErrFullSyncNeeded
	}
	r := newRenderer(names, new.Config())
	r.owns = new.Owns
	r.largeCluster = isLargeCluster(new)
	plans := r.plans(new.Services())
	markRewritten(plans, slices.Concat(ch.Added, ch.Changed))
	opts.stale = chainsGone(names, old, new, ch)
	// A partial sync that re-declares many chains meets the same
	// quadratic cost in iptables-nft as a full one; "-S" avoids it at the
	// price of listing the tables, which only pays when the partial input
	// is large (see listPays).
	text := r.render(plans, opts)
	if listPays(plans, len(opts.stale), text) {
		opts.listTables = true
		text = r.render(plans, opts)
	}
	return text, nil
}

// markRewritten marks for rewriting the plans of the ServicePorts named in
// touched (which it sorts); plans are sorted by name, as a Ruleset's
// Services are.
func markRewritten(plans []plan, touched []servicemap.PortName) {
	slices.SortFunc(touched, servicemap.PortName.Compare)
	i := 0
	for j := range plans {
		name := plans[j].service.Name
		for i < len(touched) && touched[i].Compare(name) < 0 {
			i++
		}
		plans[j].rewrite = i < len(touched) && touched[i] == name
	}
}

// chainsGone lists the nat chains that go away between old and new: all of
// a removed ServicePort's, and those a changed one no longer uses.
func chainsGone(names Names, old, new *ruleset.Ruleset, ch ruleset.Changes) []string {
	var stale []string
	beforeRenderer := newRenderer(names, old.Config())
	for _, name := range ch.Removed {
		if s, ok := old.Service(name); ok {
			before := beforeRenderer.plan(s)
			stale = append(stale, before.chains()...)
		}
	}
	afterRenderer := newRenderer(names, new.Config())
	for _, name := range ch.Changed {
		oldService, inOld := old.Service(name)
		newService, inNew := new.Service(name)
		if !inOld || !inNew {
			continue
		}
		before, after := beforeRenderer.plan(oldService), afterRenderer.plan(newService)
		keep := after.chains()
		for _, c := range before.chains() {
			if !slices.Contains(keep, c) {
				stale = append(stale, c)
			}
		}
	}
	return stale
}

// listPays reports whether "-S" lines make restoring text (a partial
// render) cheaper. Without them iptables-nft 1.8.9 inserts every chain name
// the input mentions into a sorted linked list, once per line that mentions
// it: time ~ c₁·K·L for K names and L lines. With them it lists the whole
// table instead: time ~ c₂·R for R rules in the kernel. The threshold,
// c₂/c₁ = listCostRatio, is where the two restores cross in the kernel.
func listPays(plans []plan, stale int, text []byte) bool {
	lines := bytes.Count(text, []byte("\n"))
	names := 16 + stale // top-level chains and the stale ones
	rules := 16         // a full render's rule count, about
	for i := range plans {
		p := &plans[i]
		names += 3 // jumped to from the top-level chains
		rules += len(p.service.ClusterTargets) + len(p.service.LocalTargets) + 2*len(p.endpoints) + 8
		if p.rewrite {
			names += len(p.chains())
		}
	}
	return names*lines > listCostRatio*rules
}

// listCostRatio is c₂/c₁ of listPays, measured at 10,000 Services × 10
// endpoints (iptables-nft 1.8.9, kernel 6.18; scalegen's cluster), where
// the two restores cross between 300 and 1,000 rewritten Services: one
// Service rewritten, 1.2 s without "-S" and 3.9 s with; 300, 3.4–3.7 s
// and 4.3–4.4 s; 1,000, 15–16 s and 4.8–5.0 s; 3,000, 106–114 s and
// 6.4–7.1 s. TestPartialListsOnlyWhenLarge holds these cases on their
// side; at 1,000 the ratio put the one-Service case at the threshold.
const listCostRatio = 4000

// natChains lists the nat chains a render of rs declares, sorted.
func natChains(names Names, rs *ruleset.Ruleset) []string {
	r := newRenderer(names, rs.Config())
	var cs []string
	for _, c := range names.NATChains() {
		if c != names.MasqNonPod() || len(rs.Config().ClusterCIDRs) > 1 {
			cs = append(cs, c)
		}
	}
	plans := r.plans(rs.Services())
	for i := range plans {
		cs = append(cs, plans[i].chains()...)
	}
	slices.Sort(cs)
	return cs
}

// staleChains lists the nat chains a render of old declares and one of new
// does not, sorted. A nil old has none.
func staleChains(names Names, old, new *ruleset.Ruleset) []string {
	if old == nil {
		return nil
	}
	keep := natChains(names, new)
	var stale []string
	for _, c := range natChains(names, old) {
		if _, found := slices.BinarySearch(keep, c); !found {
			stale = append(stale, c)
		}
	}
	return stale
}

// RenderJumps returns, as iptables-restore input, the rules that the
// Executor inserts into the built-in chains to reach n's chains, in the
// order they end up there (each is inserted first in its chain). Render's
// output followed by RenderJumps' is the whole rule set that a full sync
// leaves in tables that held no other rules: what an evaluator of the rules
// (trace/iptrace) needs to follow a packet from the built-in chains.
func RenderJumps(n Names) []byte {
	var b strings.Builder
	for _, table := range []string{"filter", "nat"} {
		b.WriteString("*" + table + "\n")
		for _, j := range jumps {
			if j.table == table {
				b.WriteString("-I " + j.from + " 1 " + restoreArgs(j.spec(n)) + "\n")
			}
		}
		b.WriteString("COMMIT\n")
	}
	return []byte(b.String())
}
