package proxy

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	v1 "k8s.io/api/core/v1"
)

// badAddressNode is node n1 with one good address per family, and a zoned,
// an unparsable and an unspecified one.
const badAddressNode = `apiVersion: v1
kind: Node
metadata: {name: n1}
status:
  addresses:
  - {type: InternalIP, address: "fe80::1%veth0"}
  - {type: InternalIP, address: 198.18.0.10}
  - {type: ExternalIP, address: 2001:db8::10}
  - {type: ExternalIP, address: "198.18.0.999"}
  - {type: InternalIP, address: "0.0.0.0"}
  - {type: Hostname, address: n1}
`

// TestBadNodeAddressIsAWarning: a Node whose addresses include a zoned, an
// unparsable and an unspecified one, and one of a family not served, still
// gets its Services synced, with NodePorts on its good addresses; each bad
// address is a warning naming the Node and the address.
func TestBadNodeAddressIsAWarning(t *testing.T) {
	zoned := `Node n1: InternalIP address \"fe80::1%veth0\" has a zone: skipped`
	unparsable := `Node n1: ExternalIP address \"198.18.0.999\" is not an IP address: skipped`
	unspecified := `Node n1: InternalIP address \"0.0.0.0\" is not a unicast address: skipped`
	v6NotServed := `Node n1: ExternalIP address \"2001:db8::10\" is IPv6, a family not served: skipped`
	for _, tt := range []struct {
		name     string
		flags    []string
		want     map[v1.IPFamily][]netip.Addr
		warnings []string
	}{
		{
			name:     "families from the node's addresses",
			want:     map[v1.IPFamily][]netip.Addr{v1.IPv4Protocol: {netip.MustParseAddr("198.18.0.10")}, v1.IPv6Protocol: {netip.MustParseAddr("2001:db8::10")}},
			warnings: []string{zoned, unparsable, unspecified},
		},
		{
			name:     "IPv4 only",
			flags:    []string{"--ip-family", "ipv4"},
			want:     map[v1.IPFamily][]netip.Addr{v1.IPv4Protocol: {netip.MustParseAddr("198.18.0.10")}},
			warnings: []string{zoned, v6NotServed, unparsable, unspecified},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			backends := map[v1.IPFamily]*fakeBackend{}
			dir := writeManifests(t, map[string]string{"node.yaml": badAddressNode, "svc.yaml": goodService})
			var out, errs bytes.Buffer
			args := append([]string{"--manifests", dir, "--node-name", "n1", "--once"}, tt.flags...)
			if code := Run(fakeMode(backends), args, &out, &errs); code != 0 {
				t.Fatalf("exit %d, stderr: %s", code, errs.String())
			}
			for _, w := range tt.warnings {
				if strings.Count(errs.String(), w) != 1 {
					t.Errorf("warning %q not logged once; stderr:\n%s", w, errs.String())
				}
			}
			got := map[v1.IPFamily][]netip.Addr{}
			for f, b := range backends {
				if len(b.synced) != 1 {
					t.Fatalf("%s: synced %d Rulesets, want one", f, len(b.synced))
				}
				got[f] = b.synced[0].Config().NodePortAddresses
			}
			if rs := backends[v1.IPv4Protocol].synced[0]; rs.Len() != 1 {
				t.Errorf("synced %d IPv4 Services, want ns/good", rs.Len())
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("NodePort addresses per family (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNodeAddressesFollowTheNode: the NodePort addresses are the Node's
// current ones; --node-ip overrides them.
func TestNodeAddressesFollowTheNode(t *testing.T) {
	must := warnings.Must(t)
	a1, a2 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	backend := &fakeBackend{family: v1.IPv4Protocol}
	p, eng := testProxy(t, backend)
	must.None(p.state.UpdateService(service("a", "198.19.0.1")))
	for _, step := range []struct {
		node    *v1.Node
		nodeIPs []netip.Addr
		want    []netip.Addr
	}{
		{node("198.18.0.1"), nil, []netip.Addr{a1}},
		{node("198.18.0.1", "fe80::1%eth0", "198.18.0.2"), nil, []netip.Addr{a1, a2}},
		{node("fe80::1%eth0"), nil, nil},
		{node("198.18.0.1"), []netip.Addr{a2}, []netip.Addr{a2}},
	} {
		_ = p.state.UpdateNode(step.node) // a zoned address warns: state's tests check that
		p.opts.NodeIPs = step.nodeIPs
		if err := eng.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
		got := backend.synced[len(backend.synced)-1].Config().NodePortAddresses
		if diff := cmp.Diff(step.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("Node %v, --node-ip %v: NodePort addresses (-want +got):\n%s", step.node.Status.Addresses, step.nodeIPs, diff)
		}
	}
}

// node is node n1 with the given InternalIP addresses.
func node(addrs ...string) *v1.Node {
	n := &v1.Node{}
	n.Name = "n1"
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a})
	}
	return n
}
