package nftables_test

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/ruleset"
)

// BenchmarkUpdateRenderChanges: the incremental generation for one Service
// whose endpoints changed, in a scalegen cluster of 100 to 30,000 Services ×
// 10 endpoints: ruleset.Builder.Update from the previous Ruleset, then
// RenderChanges between the two into a transaction. The trackers'
// snapshots are taken beforehand. The time should not grow with the number
// of Services.
func BenchmarkUpdateRenderChanges(b *testing.B) {
	for _, n := range []int{100, 1000, 10000, 30000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			must := warnings.Must(b)
			spec := scalegen.Spec{Services: n}
			svcs, eps := scaleworld.Trackers(spec)
			builder, err := ruleset.NewBuilder(scaleworld.Config())
			if err != nil {
				b.Fatal(err)
			}
			ss, _ := svcs.Snapshot()
			es, _ := eps.Snapshot()
			rs, ws := builder.Build(ss, es)
			warnings.None(b, ws)
			rs.ServicesAt(ruleset.Frontend{}) // index it now, not in the first Update
			// Service n−50 (a plain TCP ClusterIP Service at every
			// size), its endpoints in two versions that the loop
			// alternates.
			var snaps [2]endpoints.Snapshot
			for v := range snaps {
				must.Used(eps.Update(spec.ChangedSlice(n-50, v+1)))
				snaps[v], _ = eps.Snapshot()
			}
			fake := knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable)
			ops := 0
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; b.Loop(); i++ {
				next, ch, ws := builder.Update(rs, ss, snaps[i%2])
				warnings.None(b, ws)
				tx := fake.NewTransaction()
				if _, err := nftables.RenderChanges(tx, rs, next, nftables.Options{}, nil); err != nil {
					b.Fatal(err)
				}
				if len(ch.Changed) != 1 || tx.NumOperations() == 0 {
					b.Fatalf("Changes %+v, %d operations: want one Service changed", ch, tx.NumOperations())
				}
				ops = max(ops, tx.NumOperations())
				rs = next
			}
			// CPU time (all threads: GC included) per op, which other
			// processes on the machine disturb less than ns/op.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(ops), "ops/tx")
		})
	}
}

// cpuTime is the process's user and system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestUpdateRenderChangesSizeIndependent: in the benchmark's clusters, the
// transaction for one changed Service is the same at 100 and at 3,000
// Services (Service n−50 of each, a plain TCP ClusterIP Service: its chain
// names differ, so compare the kinds of operations).
func TestUpdateRenderChangesSizeIndependent(t *testing.T) {
	must := warnings.Must(t)
	if testing.Short() {
		t.Skip("builds a 3,000-Service ruleset")
	}
	var kinds [2][]string
	for k, n := range []int{100, 3000} {
		spec := scalegen.Spec{Services: n}
		svcs, eps := scaleworld.Trackers(spec)
		builder, err := ruleset.NewBuilder(scaleworld.Config())
		if err != nil {
			t.Fatal(err)
		}
		ss, _ := svcs.Snapshot()
		es, _ := eps.Snapshot()
		rs, ws := builder.Build(ss, es)
		warnings.None(t, ws)
		must.Used(eps.Update(spec.ChangedSlice(n-50, 1)))
		es, _ = eps.Snapshot()
		next, _, ws := builder.Update(rs, ss, es)
		warnings.None(t, ws)
		tx := knftables.NewFake(knftables.IPv4Family, nftables.DefaultTable).NewTransaction()
		if _, err := nftables.RenderChanges(tx, rs, next, nftables.Options{}, nil); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(tx.String(), "\n") {
			if f := strings.Fields(line); len(f) >= 2 {
				kinds[k] = append(kinds[k], f[0]+" "+f[1])
			}
		}
	}
	if !slices.Equal(kinds[0], kinds[1]) {
		t.Errorf("operations at 100 Services:\n%v\nat 3,000:\n%v", kinds[0], kinds[1])
	}
}
