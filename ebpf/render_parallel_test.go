package ebpf

import (
	"runtime"
	"testing"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
)

// Render computes a large Ruleset's entries on several goroutines: the
// Contents are those of one, group IDs included.
func TestRenderSameOnAnyNumberOfGoroutines(t *testing.T) {
	w := scaleworld.New(scalegen.Spec{Services: 9000})
	prev := runtime.GOMAXPROCS(1)
	one := Render(w.Ruleset, nil).Maps()
	runtime.GOMAXPROCS(4)
	four := Render(w.Ruleset, nil).Maps()
	runtime.GOMAXPROCS(prev)
	if !one.Equal(four) {
		t.Fatalf("one goroutine: %d services, %d backends; four: %d, %d (or other elements)", len(one.Services), len(one.Backends), len(four.Services), len(four.Backends))
	}
}
