package ruleset

import (
	"testing"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// BenchmarkScaleSpread is spread alone for every port of a generated
// cluster of 10,000 Services × 10 endpoints, in one goroutine, with slabs
// made once with room for every port's slices: it measures spread's passes
// over the endpoints, not the allocation of the slices (BenchmarkScaleBuild
// measures the whole). The cluster is fed into trackers here rather than
// through scaleworld, which imports this package.
func BenchmarkScaleSpread(b *testing.B) {
	must := warnings.Must(b)
	spec := scalegen.Spec{Services: 10000}
	st := servicemap.NewTracker(spec.Family(), servicemap.Filter{})
	et := endpoints.NewTracker(spec.Family(), servicemap.Filter{})
	for i := range spec.Services {
		must.Used(st.Update(spec.Service(i)))
		must.Used(et.Update(spec.Slice(i)))
	}
	ss, _ := st.Snapshot()
	es, _ := et.Snapshot()
	builder, err := NewBuilder(Config{Family: spec.Family(), Node: topology.Node{Name: scalegen.NodeName, Zone: scalegen.NodeZone}})
	if err != nil {
		b.Fatal(err)
	}
	var ports []*servicemap.ServicePort
	var eps [][]endpoints.Endpoint
	nEndpoints := 0
	for sp := range ss.All() {
		ports = append(ports, sp)
		eps = append(eps, es.Get(sp.Name))
		nEndpoints += len(eps[len(eps)-1])
	}
	svcs := make([]Service, len(ports))
	targets := make([]Target, 2*nEndpoints)
	b.ReportAllocs()
	for b.Loop() {
		alloc := slabs{targets: targets}
		for i, sp := range ports {
			alloc.left = len(ports) - i
			svcs[i] = Service{ServicePort: sp}
			builder.spread(&svcs[i], eps[i], &alloc)
		}
	}
}
