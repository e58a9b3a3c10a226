package flat

import (
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// A Service port whose name names.Safe refuses is warned about and left out
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
	st := &State{r: newFlatRenderer(ruleset.Config{Family: v1.IPv4Protocol}, Options{})}
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
