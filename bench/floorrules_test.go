package bench

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
)

func writeString(t *testing.T, write func(w *strings.Builder) error) string {
	t.Helper()
	var b strings.Builder
	if err := write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

var twoPods = []netip.Addr{netip.MustParseAddr("198.18.64.2"), netip.MustParseAddr("198.18.65.2")}

// TestFloorIptables checks the iptables floor rulesets line by line, with
// the chain names taken from the functions that make them (their shape is
// checked in TestFloorNames).
func TestFloorIptables(t *testing.T) {
	rules := floorRules{Endpoints: 3, Pods: twoPods}
	svc := iptablesSvcChain
	sep := func(i, j int) string { return iptablesSepChain(i, j, rules.endpointAddrs(i)[j]) }
	serviceRules := func(i int) []string {
		return []string{
			fmt.Sprintf(`-A %s -m statistic --mode random --probability 0.3333333333 -j %s`, svc(i), sep(i, 0)),
			fmt.Sprintf(`-A %s -m statistic --mode random --probability 0.5000000000 -j %s`, svc(i), sep(i, 1)),
			fmt.Sprintf(`-A %s -j %s`, svc(i), sep(i, 2)),
			fmt.Sprintf(`-A %s -m tcp -p tcp -j DNAT --to-destination 198.18.64.2:8080`, sep(i, 0)),
			fmt.Sprintf(`-A %s -m tcp -p tcp -j DNAT --to-destination 198.18.65.2:8080`, sep(i, 1)),
			fmt.Sprintf(`-A %s -m tcp -p tcp -j DNAT --to-destination 198.18.64.2:8080`, sep(i, 2)),
		}
	}
	dispatch := func(i int) string {
		return fmt.Sprintf(`-A KUBE-SERVICES -m comment --comment "%s:http cluster IP" -m tcp -p tcp -d %v --dport 80 -j %s`, floorService(i), scalegen.ClusterIP(i), svc(i))
	}
	declare := func(i int) []string {
		return []string{":" + svc(i) + " - [0:0]", ":" + sep(i, 0) + " - [0:0]", ":" + sep(i, 1) + " - [0:0]", ":" + sep(i, 2) + " - [0:0]"}
	}
	lines := func(parts ...any) string {
		var out []string
		for _, p := range parts {
			switch p := p.(type) {
			case string:
				out = append(out, p)
			case []string:
				out = append(out, p...)
			}
		}
		return strings.Join(out, "\n") + "\n"
	}
	for _, tc := range []struct {
		name        string
		first, last int
		want        string
	}{
		{"full, 2 Services", 0, 2, lines("*nat", ":KUBE-SERVICES - [0:0]", declare(0), declare(1),
			dispatch(0), dispatch(1), serviceRules(0), serviceRules(1), "COMMIT")},
		{"Service 2 added to 2", 2, 3, lines("*nat", ":KUBE-SERVICES - [0:0]", declare(2),
			dispatch(0), dispatch(1), dispatch(2), serviceRules(2), "COMMIT")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := writeString(t, func(w *strings.Builder) error { return rules.writeIptables(w, tc.first, tc.last) })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("writeIptables(%d, %d) (-want +got):\n%s", tc.first, tc.last, diff)
			}
		})
	}
}

// TestFloorNft checks the nft floor scripts line by line.
func TestFloorNft(t *testing.T) {
	rules := floorRules{Endpoints: 2, Pods: twoPods}
	ep := func(i, j int) string { return nftEndpointChain(i, j, twoPods[j]) }
	base := []string{
		"add chain ip svcproxy-floor nat-prerouting { type nat hook prerouting priority dstnat ; }",
		"add chain ip svcproxy-floor services",
		"add map ip svcproxy-floor service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }",
		"add rule ip svcproxy-floor nat-prerouting jump services",
		"add rule ip svcproxy-floor services ip daddr . meta l4proto . th dport vmap @service-ips",
	}
	service := func(i int) []string {
		return []string{
			"add chain ip svcproxy-floor " + nftServiceChain(i),
			"add chain ip svcproxy-floor " + ep(i, 0),
			"add rule ip svcproxy-floor " + ep(i, 0) + " meta l4proto tcp dnat to 198.18.64.2:8080",
			"add chain ip svcproxy-floor " + ep(i, 1),
			"add rule ip svcproxy-floor " + ep(i, 1) + " meta l4proto tcp dnat to 198.18.65.2:8080",
			fmt.Sprintf("add rule ip svcproxy-floor %s numgen random mod 2 vmap { 0 : goto %s , 1 : goto %s }", nftServiceChain(i), ep(i, 0), ep(i, 1)),
			fmt.Sprintf("add element ip svcproxy-floor service-ips { %v . tcp . 80 : goto %s }", scalegen.ClusterIP(i), nftServiceChain(i)),
		}
	}
	table := []string{"add table ip svcproxy-floor"}
	join := func(parts ...[]string) string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return strings.Join(out, "\n") + "\n"
	}
	for _, tc := range []struct {
		name        string
		first, last int
		base        bool
		want        string
	}{
		{"whole table, 2 Services", 0, 2, true, join(table, base, service(0), service(1))},
		{"a later chunk", 1, 2, false, join(table, service(1))},
		{"Service 5 added", 5, 6, false, join(table, service(5))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := writeString(t, func(w *strings.Builder) error { return rules.writeNft(w, tc.first, tc.last, tc.base) })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("writeNft(%d, %d, %v) (-want +got):\n%s", tc.first, tc.last, tc.base, diff)
			}
		})
	}
}

// TestFloorChunks checks that the chunked nft load holds exactly the whole
// table: its chunks, joined, are the one-transaction script but for the
// repeated "add table" lines.
func TestFloorChunks(t *testing.T) {
	rules := floorRules{Endpoints: 2}
	const n = 2500
	full := writeString(t, func(w *strings.Builder) error { return rules.writeNft(w, 0, n, true) })
	var joined strings.Builder
	for from := 0; from < n; from += floorChunk {
		chunk := writeString(t, func(w *strings.Builder) error { return rules.writeNft(w, from, min(from+floorChunk, n), from == 0) })
		if from > 0 {
			chunk = strings.TrimPrefix(chunk, "add table ip svcproxy-floor\n")
		}
		joined.WriteString(chunk)
	}
	if diff := cmp.Diff(full, joined.String()); diff != "" {
		t.Errorf("chunks differ from the whole table (-whole +chunks):\n%s", diff)
	}
}

// TestFloorEndpoints checks where the endpoints' addresses come from:
// scalegen's EndpointSlices, or the pods given.
func TestFloorEndpoints(t *testing.T) {
	for _, i := range []int{0, 49, 1234, scalegen.MaxServices - 1} {
		slice := scalegen.Spec{Services: scalegen.MaxServices}.Slice(i)
		got := floorRules{Endpoints: scalegen.DefaultEndpoints}.endpointAddrs(i)
		var want []netip.Addr
		for _, e := range slice.Endpoints {
			want = append(want, netip.MustParseAddr(e.Addresses[0]))
		}
		if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("Service %d: endpoints differ from scalegen's (-want +got):\n%s", i, diff)
		}
	}
	got := floorRules{Endpoints: 3, Pods: twoPods}.endpointAddrs(7)
	if want := []netip.Addr{twoPods[0], twoPods[1], twoPods[0]}; !cmp.Equal(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })) {
		t.Errorf("with pods: endpoints %v, want %v", got, want)
	}
}

// TestFloorNames checks that chain names are unique, within the kernel's
// limits (28 characters for iptables; nft's 256), and made only of the
// characters kube-proxy's are.
func TestFloorNames(t *testing.T) {
	rules := floorRules{Endpoints: scalegen.DefaultEndpoints}
	iptRE := regexp.MustCompile(`^KUBE-(SVC|SEP)-[A-Z2-7]{16}$`)
	nftRE := regexp.MustCompile(`^(service|endpoint)-[A-Z2-7]{8}-ns\d{3}/svc\d{5}/tcp/http(__198\.18\.\d+\.\d+/8080)?$`)
	seen := map[string]string{}
	check := func(re *regexp.Regexp, name, what string) {
		if !re.MatchString(name) || len(name) > 256 {
			t.Errorf("%s: bad name %q", what, name)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("%s and %s are both named %q", other, what, name)
		}
		seen[name] = what
	}
	for i := range 2000 {
		check(iptRE, iptablesSvcChain(i), fmt.Sprintf("iptables Service %d", i))
		check(nftRE, nftServiceChain(i), fmt.Sprintf("nft Service %d", i))
		for j, a := range rules.endpointAddrs(i) {
			check(iptRE, iptablesSepChain(i, j, a), fmt.Sprintf("iptables endpoint %d/%d", i, j))
			check(nftRE, nftEndpointChain(i, j, a), fmt.Sprintf("nft endpoint %d/%d", i, j))
		}
	}
	// Endpoints of one Service at the same address (pods reused) still have
	// chains of their own.
	if a, b := iptablesSepChain(0, 0, twoPods[0]), iptablesSepChain(0, 2, twoPods[0]); a == b {
		t.Errorf("endpoints 0 and 2 at the same address share the chain %s", a)
	}
	if a, b := nftEndpointChain(0, 0, twoPods[0]), nftEndpointChain(0, 2, twoPods[0]); a == b {
		t.Errorf("endpoints 0 and 2 at the same address share the chain %s", a)
	}
}
