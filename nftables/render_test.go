package nftables_test

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenCase is one representative ruleset.
type goldenCase struct {
	name string
	cfg  func() ruleset.Config
	opts nftables.Options
	objs []any
}

var goldenCases = []goldenCase{
	{name: "clusterip-1-endpoint", cfg: config4, objs: []any{
		svc("ns1", "svc1", "198.19.0.41"),
		slice("ns1", "svc1", 8080, ep{ip: "198.18.64.2", node: node}),
	}},
	{name: "clusterip-3-endpoints", cfg: config4, objs: []any{
		svc("ns1", "svc1", "198.19.0.41"),
		slice("ns1", "svc1", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.65.2", node: "node-b"}, ep{ip: "198.18.66.2", node: "node-c"}),
	}},
	{name: "clusterip-4-endpoints-udp", cfg: config4, objs: []any{
		svc("kube-system", "kube-dns", "198.19.0.10", udp),
		sliceProto("kube-system", "kube-dns", v1.ProtocolUDP, 53,
			ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.64.3", node: node},
			ep{ip: "198.18.65.2", node: "node-b"}, ep{ip: "198.18.65.3", node: "node-b"},
			ep{ip: "198.18.65.4", node: "node-b", notReady: true}),
	}},
	{name: "no-endpoints", cfg: config4, objs: []any{
		svc("ns2", "empty", "198.19.0.42", nodePort(30042)),
		slice("ns2", "empty", 8080, ep{ip: "198.18.64.9", node: node, notReady: true}),
	}},
	{name: "internal-local-with-local", cfg: config4, objs: []any{
		svc("ns3", "itp", "198.19.0.43", internalLocal),
		slice("ns3", "itp", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.65.2", node: "node-b"}),
	}},
	{name: "internal-local-without-local", cfg: config4, objs: []any{
		svc("ns3", "itp", "198.19.0.43", internalLocal),
		slice("ns3", "itp", 8080, ep{ip: "198.18.65.2", node: "node-b"}),
	}},
	{name: "nodeport-cluster", cfg: config4, objs: []any{
		svc("ns4", "np", "198.19.0.44", nodePort(30044)),
		slice("ns4", "np", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.65.2", node: "node-b"}),
	}},
	{name: "nodeport-local", cfg: config4, objs: []any{
		svc("ns4", "np", "198.19.0.44", nodePort(30044), externalLocal),
		slice("ns4", "np", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.65.2", node: "node-b"}),
	}},
	{name: "nodeport-local-without-local", cfg: config4, objs: []any{
		svc("ns4", "np", "198.19.0.44", nodePort(30044), externalLocal),
		slice("ns4", "np", 8080, ep{ip: "198.18.65.2", node: "node-b"}),
	}},
	{name: "nodeport-addresses-localhost", cfg: func() ruleset.Config {
		c := config4()
		c.NodePortAddresses = []netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("127.0.0.1")}
		c.LocalhostNodePorts = true
		c.MasqueradeAll = true
		c.MasqueradeMark = 1 << 3
		c.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16")}
		return c
	}, opts: nftables.Options{Table: "svcproxy"}, objs: []any{
		svc("ns4", "np", "198.19.0.44", nodePort(30044)),
		slice("ns4", "np", 8080, ep{ip: "198.18.64.2", node: node}),
	}},
	{name: "loadbalancer-source-ranges", cfg: func() ruleset.Config {
		c := config4()
		c.NodePortAddresses = []netip.Addr{netip.MustParseAddr("198.18.0.1")}
		return c
	}, objs: []any{
		svc("ns5", "lb", "198.19.0.45", loadBalancer("198.19.128.5"), nodePort(30045), sourceRanges("198.18.32.0/24", "198.18.0.0/24")),
		slice("ns5", "lb", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.65.2", node: "node-b"}),
	}},
	{name: "loadbalancer-local", cfg: config4, objs: []any{
		svc("ns5", "lb", "198.19.0.45", loadBalancer("198.19.128.5", "198.19.128.6"), nodePort(30045), externalLocal, sourceRanges("198.18.32.0/24")),
		slice("ns5", "lb", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.65.2", node: "node-b"}),
	}},
	{name: "externalips", cfg: config4, objs: []any{
		svc("ns6", "ext", "198.19.0.46", externalIPs("198.18.0.100", "198.18.0.101")),
		slice("ns6", "ext", 8080, ep{ip: "198.18.64.2", node: node}),
		// another Service claims the same external IP and port: the
		// first in name order keeps it.
		svc("ns6", "ext2", "198.19.0.47", externalIPs("198.18.0.101")),
		slice("ns6", "ext2", 8080, ep{ip: "198.18.64.3", node: node}),
	}},
	{name: "affinity", cfg: config4, objs: []any{
		svc("ns7", "sticky", "198.19.0.47", affinity(10800), nodePort(30047)),
		slice("ns7", "sticky", 8080, ep{ip: "198.18.64.2", node: node}, ep{ip: "198.18.65.2", node: "node-b"}),
	}},
	{name: "terminating", cfg: config4, objs: []any{
		svc("ns8", "drain", "198.19.0.48"),
		slice("ns8", "drain", 8080, ep{ip: "198.18.64.2", node: node, terminating: true}, ep{ip: "198.18.64.3", node: node, notReady: true}),
	}},
	{name: "ipv6", cfg: config6, objs: []any{
		svc("ns1", "svc1", "2001:db8:19::41", nodePort(30041), affinity(60), externalIPs("2001:db8:18::100")),
		slice("ns1", "svc1", 8080, ep{ip: "2001:db8:18:40::2", node: node}, ep{ip: "2001:db8:18:41::2", node: "node-b"}),
		svc("ns2", "empty", "2001:db8:19::42", nodePort(30042), externalLocal),
	}},
	// Names as long as Kubernetes allows: the comment of the reject
	// element, "namespace/name:port", is cut to nft's 128 bytes.
	{name: "long-names", cfg: config4, objs: []any{
		svc(strings.Repeat("n", 63), strings.Repeat("s", 63), "198.19.0.49", nodePort(30049), func(s *v1.Service) {
			s.Spec.Ports[0].Name = strings.Repeat("p", 15)
		}),
	}},
	{name: "ipv6-local", cfg: config6, objs: []any{
		svc("ns4", "np", "2001:db8:19::44", nodePort(30044), externalLocal, internalLocal),
		slice("ns4", "np", 8080, ep{ip: "2001:db8:18:40::2", node: node}, ep{ip: "2001:db8:18:41::2", node: "node-b"}),
	}},
	// An external IP claimed by a Service without endpoints, first in name
	// order, and by one with endpoints: the second owns it
	// (ruleset.Ruleset.Owner), and the first puts no reject element there.
	{name: "contested-external-ip", cfg: config4, objs: []any{
		svc("ns6", "a", "198.19.0.50", externalIPs("198.18.0.100")),
		svc("ns6", "b", "198.19.0.51", externalIPs("198.18.0.100")),
		slice("ns6", "b", 8080, ep{ip: "198.18.64.2", node: node}),
	}},
}

func (c goldenCase) ruleset(tb testing.TB) *ruleset.Ruleset {
	w := newWorld(tb, c.cfg())
	w.add(c.objs...)
	return w.build()
}

// TestGolden renders each case into an empty knftables.Fake and compares its
// Dump with testdata/NAME.nft (go test -update rewrites them).
func TestGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			rs := c.ruleset(t)
			fake := knftables.NewFake(nftables.Family(rs.Config().Family), tableName(c.opts))
			tx := fake.NewTransaction()
			res, err := nftables.Render(tx, rs, c.opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			apply(t, fake, tx)
			got := fake.Dump()
			for _, w := range res.Warnings {
				got += "# warning: " + w.String() + "\n"
			}
			path := filepath.Join("testdata", c.name+".nft")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("dump differs from %s (-want +got):\n%s", path, diff)
			}

			// The same state reached incrementally from an empty table.
			empty := newWorld(t, c.cfg()).build()
			inc := knftables.NewFake(nftables.Family(rs.Config().Family), tableName(c.opts))
			tx = inc.NewTransaction()
			if _, err := nftables.Render(tx, empty, c.opts, nil); err != nil {
				t.Fatal(err)
			}
			apply(t, inc, tx)
			tx = inc.NewTransaction()
			if _, err := nftables.RenderChanges(tx, empty, rs, c.opts, nil); err != nil {
				t.Fatal(err)
			}
			apply(t, inc, tx)
			if diff := cmp.Diff(canonical(fake.Dump()), canonical(inc.Dump())); diff != "" {
				t.Errorf("incremental from empty differs from full render (-full +incremental):\n%s", diff)
			}
		})
	}
}

func tableName(o nftables.Options) string {
	if o.Table == "" {
		return nftables.DefaultTable
	}
	return o.Table
}

// TestNamesMatchKubeProxy checks the chain names against kube-proxy's
// nftables-mode test vectors.
func TestNamesMatchKubeProxy(t *testing.T) {
	name := servicemap.PortName{Namespace: "ns1", Name: "svc1", Port: "p80", Protocol: v1.ProtocolTCP}
	if got, want := "service-"+nftables.ServiceChainBase(name), "service-ULMVA6XW-ns1/svc1/tcp/p80"; got != want {
		t.Errorf("service chain %q, want %q", got, want)
	}
	if got, want := "endpoint-"+nftables.EndpointChainBase(name, netip.MustParseAddrPort("10.180.0.1:80")), "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"; got != want {
		t.Errorf("endpoint chain %q, want %q", got, want)
	}
	v6 := nftables.EndpointChainBase(name, netip.MustParseAddrPort("[2001:db8::1]:80"))
	if !strings.HasSuffix(v6, "__2001.db8..1/80") {
		t.Errorf("IPv6 endpoint chain base %q: want colons written as dots", v6)
	}
	long := servicemap.PortName{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("s", 63), Port: strings.Repeat("p", 15), Protocol: v1.ProtocolSCTP}
	b := nftables.EndpointChainBase(long, netip.MustParseAddrPort("[2001:db8:1234:5678:9abc:def0:1234:5678]:65535"))
	if len("endpoint-"+b) >= knftables.NameLengthMax {
		t.Errorf("endpoint chain name of %d characters", len("endpoint-"+b))
	}
}

// TestScript: the dry-run script is the transaction text, and a table name
// that nft would have to quote is refused.
func TestScript(t *testing.T) {
	c := goldenCases[0]
	script, res, err := nftables.Script(c.ruleset(t), c.opts)
	if err != nil {
		t.Fatal(err)
	}
	warnings.None(t, res.Warnings)
	if !strings.HasPrefix(script, "add table ip kube-proxy { comment \"rules for kube-proxy\" ; }\n") {
		t.Errorf("script starts with %q", strings.SplitN(script, "\n", 2)[0])
	}
	for _, bad := range []string{"kube proxy", "x;flush ruleset", "1abc", `a"b`} {
		if _, _, err := nftables.Script(c.ruleset(t), nftables.Options{Table: bad}); err == nil {
			t.Errorf("table %q accepted", bad)
		}
	}
}

// TestRenderExisting: a full render over a table holding leftovers flushes
// the chains it does not use (to be deleted later) and deletes the sets and
// maps it does not use.
func TestRenderExisting(t *testing.T) {
	c := goldenCases[13] // affinity
	rs := c.ruleset(t)
	fake := knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable)
	tx := fake.NewTransaction()
	if _, err := nftables.Render(tx, rs, c.opts, nil); err != nil {
		t.Fatal(err)
	}
	apply(t, fake, tx)
	full := fake.Dump()

	// The Service goes; another comes. Leftovers in the table too.
	tx = fake.NewTransaction()
	tx.Add(&knftables.Chain{Name: "endpoints-check"})
	tx.Add(&knftables.Rule{Chain: "endpoints-check", Rule: "drop"})
	tx.Add(&knftables.Map{Name: "old-map", Type: "ipv4_addr : verdict"})
	apply(t, fake, tx)
	w := newWorld(t, c.cfg())
	w.add(goldenCases[0].objs...)
	rs2 := w.build()
	existing, err := fake.ListAll(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tx = fake.NewTransaction()
	res, err := nftables.Render(tx, rs2, c.opts, existing)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, fake, tx)
	if len(res.Stale) != 5 { // endpoints-check, external-, service-, 2 × endpoint-
		t.Errorf("stale chains %q, want 5", res.Stale)
	}
	fresh := knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable)
	tx = fresh.NewTransaction()
	if _, err := nftables.Render(tx, rs2, c.opts, nil); err != nil {
		t.Fatal(err)
	}
	for _, name := range res.Stale {
		tx.Add(&knftables.Chain{Name: name})
	}
	apply(t, fresh, tx)
	if diff := cmp.Diff(canonical(fresh.Dump()), canonical(fake.Dump())); diff != "" {
		t.Errorf("full render over leftovers (-want +got):\n%s", diff)
	}
	if full == fake.Dump() {
		t.Error("nothing changed")
	}
}

// TestRenderNew: a first sync in chunks leaves the table a single Render
// leaves, with the same warnings.
func TestRenderNew(t *testing.T) {
	w := newWorld(t, config4())
	for _, c := range goldenCases {
		if c.cfg().Family == v1.IPv4Protocol && c.opts.Table == "" {
			w.add(c.objs...)
		}
	}
	rs := w.build()
	one := knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable)
	tx := one.NewTransaction()
	want, err := nftables.Render(tx, rs, nftables.Options{}, map[string][]string{})
	if err != nil {
		t.Fatal(err)
	}
	apply(t, one, tx)
	for _, chunk := range []int{-1, 1, 2, 5, 100} {
		fake := knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable)
		txs, got, err := nftables.RenderNew(fake.NewTransaction, rs, nftables.Options{}, chunk)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(rs.Services()); chunk > 0 && chunk < n && len(txs) != 1+(n+chunk-1)/chunk {
			t.Errorf("chunk %d: %d transactions for %d Service ports", chunk, len(txs), n)
		}
		for _, tx := range txs {
			apply(t, fake, tx)
		}
		if diff := cmp.Diff(canonical(one.Dump()), canonical(fake.Dump())); diff != "" {
			t.Errorf("chunk %d (-Render +RenderNew):\n%s", chunk, diff)
		}
		if diff := cmp.Diff(want.Warnings, got.Warnings); diff != "" {
			t.Errorf("chunk %d: warnings (-Render +RenderNew):\n%s", chunk, diff)
		}
	}
}
