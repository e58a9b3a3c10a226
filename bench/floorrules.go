package bench

import (
	"bufio"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
)

// floorPort and floorTargetPort are the Service port and the endpoints'
// port of every floor Service (TCP).
const (
	floorPort       = 80
	floorTargetPort = 8080
)

// floorTable is the nftables table of the floor rulesets.
const floorTable = "svcproxy-floor"

// floorChunk is the number of Services per transaction of the chunked nft
// loads.
const floorChunk = 1000

// floorRules writes the kernel floors' rulesets: hand-made, kube-proxy-shaped
// NAT rules for Services of one TCP port, each with a fixed number of
// endpoints, with nothing else (no masquerading, no filter rules, no node
// ports), as iptables-restore input or as an `nft -f` script. They are the
// least a proxy with kube-proxy's layout can load for those Services, so the
// scale tool compares its executors with them.
//
// Service i has cluster IP scalegen.ClusterIP(i), port 80, and the name
// scalegen gives it. Its endpoint j, port 8080, is Pods[j mod len(Pods)]
// when Pods is set, else the address of endpoint j in scalegen's
// EndpointSlice of Service i (Spec.Slice). Every name is derived from the
// Service's index (and the endpoint's index and address), so a range of
// Services written on its own names its chains as the whole ruleset does:
// chunks and one-Service additions apply on top of earlier output.
//
// The output depends only on the fields and arguments: no clock, no
// randomness, no I/O other than w.
type floorRules struct {
	// Endpoints is the number of endpoints of every Service; at least 1.
	Endpoints int
	// Pods, when set, are the endpoints' addresses (IPv4).
	Pods []netip.Addr
}

// endpointAddrs returns the addresses of Service i's endpoints.
func (f floorRules) endpointAddrs(i int) []netip.Addr {
	addrs := make([]netip.Addr, f.Endpoints)
	if len(f.Pods) > 0 {
		for j := range addrs {
			addrs[j] = f.Pods[j%len(f.Pods)]
		}
		return addrs
	}
	slice := scalegen.Spec{Services: i + 1, Endpoints: f.Endpoints}.Slice(i)
	for j := range addrs {
		addrs[j] = netip.MustParseAddr(slice.Endpoints[j].Addresses[0])
	}
	return addrs
}

// floorService is Service i's name as "namespace/name".
func floorService(i int) string { return scalegen.Namespace(i) + "/" + scalegen.Name(i) }

// floorHash is a name-safe digest of s, n characters of base32.
func floorHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(sum[:])[:n]
}

// iptablesSvcChain and iptablesSepChain are the chains of Service i and of
// its endpoint j at addr, named as kube-proxy names them: a fixed prefix and
// 16 characters of a hash of what they stand for.
func iptablesSvcChain(i int) string {
	return "KUBE-SVC-" + floorHash(fmt.Sprintf("svc %s:http/tcp", floorService(i)), 16)
}

func iptablesSepChain(i, j int, addr netip.Addr) string {
	return "KUBE-SEP-" + floorHash(fmt.Sprintf("sep %s:http/tcp %d %v", floorService(i), j, addr), 16)
}

// writeIptables writes the nat table of Services [first, last) as
// iptables-restore input: the declaration of KUBE-SERVICES and of their
// chains, every rule of KUBE-SERVICES for Services [0, last), then their
// chains' rules, as kube-proxy writes them in its large-cluster mode: a
// comment on each rule of KUBE-SERVICES, none on the endpoint rules, a
// statistic match with probability 1/(E−j) on the jump to endpoint j < E−1.
// With first = 0 it is a full ruleset; with first = last−1 it is the partial
// restore (for --noflush) that adds Service last−1 to a loaded table, which
// rewrites KUBE-SERVICES whole as kube-proxy's partial syncs do. Nothing
// jumps to KUBE-SERVICES: kube-proxy adds that jump with separate commands.
func (f floorRules) writeIptables(w io.Writer, first, last int) error {
	b := bufio.NewWriterSize(w, 1<<20)
	eps := make([][]netip.Addr, last-first)
	for i := first; i < last; i++ {
		eps[i-first] = f.endpointAddrs(i)
	}
	fmt.Fprintln(b, "*nat")
	fmt.Fprintln(b, ":KUBE-SERVICES - [0:0]")
	for i := first; i < last; i++ {
		fmt.Fprintf(b, ":%s - [0:0]\n", iptablesSvcChain(i))
		for j, a := range eps[i-first] {
			fmt.Fprintf(b, ":%s - [0:0]\n", iptablesSepChain(i, j, a))
		}
	}
	for i := range last {
		fmt.Fprintf(b, "-A KUBE-SERVICES -m comment --comment \"%s:http cluster IP\" -m tcp -p tcp -d %v --dport %d -j %s\n",
			floorService(i), scalegen.ClusterIP(i), floorPort, iptablesSvcChain(i))
	}
	for i := first; i < last; i++ {
		f.writeIptablesService(b, i, eps[i-first])
	}
	fmt.Fprintln(b, "COMMIT")
	if err := b.Flush(); err != nil {
		return fmt.Errorf("writing the iptables floor ruleset: %w", err)
	}
	return nil
}

// writeIptablesService writes the rules of Service i's chain and of its
// endpoints' chains, without comments: kube-proxy's large-cluster mode
// (more than 1,000 endpoints, as every floor has) leaves them out.
func (f floorRules) writeIptablesService(b *bufio.Writer, i int, eps []netip.Addr) {
	for j, a := range eps {
		stat := ""
		if j < len(eps)-1 {
			stat = fmt.Sprintf("-m statistic --mode random --probability %.10f ", 1/float64(len(eps)-j))
		}
		fmt.Fprintf(b, "-A %s %s-j %s\n", iptablesSvcChain(i), stat, iptablesSepChain(i, j, a))
	}
	for j, a := range eps {
		fmt.Fprintf(b, "-A %s -m tcp -p tcp -j DNAT --to-destination %v:%d\n",
			iptablesSepChain(i, j, a), a, floorTargetPort)
	}
}

// nftServiceChain and nftEndpointChain are the chains of Service i and of
// its endpoint j at addr, named as kube-proxy's nftables mode names them (a
// hash, then what they stand for).
func nftServiceChain(i int) string {
	svc := floorService(i)
	return fmt.Sprintf("service-%s-%s/tcp/http", floorHash("svc "+svc, 8), svc)
}

func nftEndpointChain(i, j int, addr netip.Addr) string {
	svc := floorService(i)
	return fmt.Sprintf("endpoint-%s-%s/tcp/http__%v/%d", floorHash(fmt.Sprintf("sep %s %d %v", svc, j, addr), 8), svc, addr, floorTargetPort)
}

// writeNft writes Services [first, last) of table ip svcproxy-floor as an
// `nft -f` script, one command a line as knftables writes them: the table
// (always: adding an existing table is no change), with base its NAT
// prerouting chain, its services chain and the service-ips verdict map that
// the services chain looks cluster IP, protocol and port up in; then per
// Service its chain, which picks an endpoint with `numgen random mod E
// vmap`, its endpoints' DNAT chains and its element of service-ips. One
// script of all Services with base is a whole table in one transaction;
// consecutive ranges, the first with base, load it in several; a range of
// one Service without base adds that Service to the loaded table.
func (f floorRules) writeNft(w io.Writer, first, last int, base bool) error {
	b := bufio.NewWriterSize(w, 1<<20)
	t := "ip " + floorTable
	fmt.Fprintf(b, "add table %s\n", t)
	if base {
		fmt.Fprintf(b, "add chain %s nat-prerouting { type nat hook prerouting priority dstnat ; }\n", t)
		fmt.Fprintf(b, "add chain %s services\n", t)
		fmt.Fprintf(b, "add map %s service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }\n", t)
		fmt.Fprintf(b, "add rule %s nat-prerouting jump services\n", t)
		fmt.Fprintf(b, "add rule %s services ip daddr . meta l4proto . th dport vmap @service-ips\n", t)
	}
	for i := first; i < last; i++ {
		eps := f.endpointAddrs(i)
		fmt.Fprintf(b, "add chain %s %s\n", t, nftServiceChain(i))
		targets := make([]string, len(eps))
		for j, a := range eps {
			ep := nftEndpointChain(i, j, a)
			fmt.Fprintf(b, "add chain %s %s\n", t, ep)
			fmt.Fprintf(b, "add rule %s %s meta l4proto tcp dnat to %v:%d\n", t, ep, a, floorTargetPort)
			targets[j] = fmt.Sprintf("%d : goto %s", j, ep)
		}
		fmt.Fprintf(b, "add rule %s %s numgen random mod %d vmap { %s }\n", t, nftServiceChain(i), len(eps), strings.Join(targets, " , "))
		fmt.Fprintf(b, "add element %s service-ips { %v . tcp . %d : goto %s }\n", t, scalegen.ClusterIP(i), floorPort, nftServiceChain(i))
	}
	if err := b.Flush(); err != nil {
		return fmt.Errorf("writing the nftables floor ruleset: %w", err)
	}
	return nil
}
