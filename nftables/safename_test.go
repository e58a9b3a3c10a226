package nftables

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

func TestSafeName(t *testing.T) {
	ok := servicemap.PortName{Namespace: "ns-1", Name: "web-0", Port: "http", Protocol: v1.ProtocolTCP}
	tests := []struct {
		name string
		edit func(n *servicemap.PortName)
		want bool
	}{
		{"DNS labels", func(*servicemap.PortName) {}, true},
		{"unnamed port", func(n *servicemap.PortName) { n.Port = "" }, true},
		{"UDP", func(n *servicemap.PortName) { n.Protocol = v1.ProtocolUDP }, true},
		{"SCTP", func(n *servicemap.PortName) { n.Protocol = v1.ProtocolSCTP }, true},
		{"no protocol", func(n *servicemap.PortName) { n.Protocol = "" }, false},
		{"lower-case protocol", func(n *servicemap.PortName) { n.Protocol = "tcp" }, false},
		{"no namespace", func(n *servicemap.PortName) { n.Namespace = "" }, false},
		{"no name", func(n *servicemap.PortName) { n.Name = "" }, false},
		{"quote in the name", func(n *servicemap.PortName) { n.Name = `web"0` }, false},
		{"upper case in the namespace", func(n *servicemap.PortName) { n.Namespace = "Ns" }, false},
		{"space in the port", func(n *servicemap.PortName) { n.Port = "h ttp" }, false},
		{"dot in the name", func(n *servicemap.PortName) { n.Name = "web.0" }, false},
		{"byte above ASCII in the port", func(n *servicemap.PortName) { n.Port = "h\xe9" }, false},
		{"NUL in the namespace", func(n *servicemap.PortName) { n.Namespace = "ns\x00" }, false},
	}
	for _, tt := range tests {
		n := ok
		tt.edit(&n)
		if got := safeName(n); got != tt.want {
			t.Errorf("%s: safeName(%+v) = %v, want %v", tt.name, n, got, tt.want)
		}
	}
}

// A Service port whose name safeName refuses is warned about and left out
// of the flat layout, by the whole table's render and by a port's alone,
// and the ports around it are rendered. servicemap refuses such names: the
// Services are made by hand.
func TestFlatSkipsUnsafeNames(t *testing.T) {
	svc := func(ns string, ip string) *ruleset.Service {
		at := netip.MustParseAddrPort("198.18.64.2:8080")
		return &ruleset.Service{
			ServicePort: &servicemap.ServicePort{
				Name:      servicemap.PortName{Namespace: ns, Name: "web", Port: "http", Protocol: v1.ProtocolTCP},
				Family:    v1.IPv4Protocol,
				ClusterIP: netip.MustParseAddr(ip),
				Port:      80,
			},
			Internal:       ruleset.RouteCluster,
			ClusterTargets: []ruleset.Target{{Endpoint: at}},
		}
	}
	svcs := []*ruleset.Service{svc("a", "198.19.0.1"), svc("B_ad", "198.19.0.2"), svc("c", "198.19.0.3")}
	st := &FlatState{r: newFlatRenderer(ruleset.Config{Family: v1.IPv4Protocol}, Options{})}
	for _, inBlocks := range []bool{false, true} {
		out := st.renderRange(ownership{shared: map[ruleset.Frontend]bool{}}, svcs, nil, inBlocks)
		var comments []string
		for _, e := range model.Expand(out.elements) {
			if !slices.Contains(comments, e.Comment) {
				comments = append(comments, e.Comment)
			}
		}
		if want := []string{"a/web:http/TCP", "c/web:http/TCP"}; !slices.Equal(comments, want) {
			t.Errorf("whole table (in blocks %v): elements of %q, want %q", inBlocks, comments, want)
		}
		if len(out.warnings) != 1 || out.warnings[0].Namespace != "B_ad" {
			t.Errorf("whole table (in blocks %v): warnings %v, want one about B_ad", inBlocks, out.warnings)
		}
	}
	p, warns := st.r.port(nil, svcs[1])
	if len(p.elements) != 0 || len(warns) != 1 || warns[0].Namespace != "B_ad" {
		t.Errorf("one port: %d elements, warnings %v; want none, one about B_ad", len(p.elements), warns)
	}
}

// The same for kube-proxy's layout: the whole table's render warns about a
// Service port whose name safeName refuses and writes nothing of it, and
// writes the ports around it.
func TestFullSkipsUnsafeNames(t *testing.T) {
	rs := scaleworld.New(scalegen.Spec{Services: 2}).Ruleset
	r, err := newRenderer(rs.Config(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad := *rs.Services()[0]
	port := *bad.ServicePort
	port.Name.Namespace = "B_ad"
	bad.ServicePort = &port
	var res Result
	tx := knftables.NewFake(knftables.IPv4Family, DefaultTable).NewTransaction()
	st := newFullState(r, rs, &res, func(string) bool { return false }, false)
	st.services(r.knftWriter(tx), []*ruleset.Service{rs.Services()[0], &bad, rs.Services()[1]})
	text := tx.String()
	if strings.Contains(text, "B_ad") {
		t.Errorf("the unsafe port is rendered:\n%s", text)
	}
	for _, s := range rs.Services() {
		if !strings.Contains(text, s.Name.Namespace+"/"+s.Name.Name) {
			t.Errorf("%v is not rendered", s.Name)
		}
	}
	if len(res.Warnings) != 1 || res.Warnings[0].Namespace != "B_ad" {
		t.Errorf("warnings %v, want one about B_ad", res.Warnings)
	}
}
