package ebpf

import (
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
)

// genSlots draws backend slots of a few groups.
func genSlots(t *rapid.T, label string) map[BackendKey]BackendValue {
	m := map[BackendKey]BackendValue{}
	for range rapid.IntRange(0, 40).Draw(t, label) {
		k := BackendKey{ID: uint32(rapid.IntRange(0, 3).Draw(t, "id")), Slot: uint32(rapid.IntRange(0, 20).Draw(t, "slot"))}
		m[k] = BackendValue{Addr: AddrOf(ap(rapid.IntRange(1, 5).Draw(t, "ep")).Addr()), Port: 8080}
	}
	return m
}

// chunked is the backends map that holds the slots of m.
func chunked(m map[BackendKey]BackendValue) map[chunkKey]backendChunk {
	out := map[chunkKey]backendChunk{}
	for k, v := range m {
		ck, i := chunkOf(k)
		c := out[ck]
		c[i] = v
		out[ck] = c
	}
	return out
}

// slotsOf lists the slots of a backends map.
func slotsOf(m map[chunkKey]backendChunk) map[BackendKey]BackendValue {
	out := map[BackendKey]BackendValue{}
	for ck, c := range m {
		for i, v := range c {
			if v != (BackendValue{}) {
				out[BackendKey{ck.ID, ck.Chunk*chunkSlots + uint32(i)}] = v
			}
		}
	}
	return out
}

// Property: packing the slot changes of Diff(have, want) into chunks, from
// the map that holds have, leaves the map holding want, with no empty
// element; and after the first step (before the services change) every
// slot of want is in place and every slot of have that want changes or
// drops is still there, so that the programs never meet an empty slot a
// service counts.
func TestPropPackBackends(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		have, want := genSlots(t, "have"), genSlots(t, "want")
		ops := Diff(&Maps{Backends: have}, &Maps{Backends: want})
		w, err := packBackends(ops.PutBackends, ops.DelBackends, fromSlots(have))
		if err != nil {
			t.Fatal(err)
		}
		m := chunked(have)
		for i, k := range w.PutKeys {
			m[k] = w.PutValues[i]
		}
		mid := slotsOf(m)
		for k, v := range want {
			if mid[k] != v {
				t.Fatalf("after the puts, slot %v holds %v, want %v", k, mid[k], v)
			}
		}
		for k := range have {
			if _, ok := mid[k]; !ok {
				t.Fatalf("after the puts, slot %v of have is gone", k)
			}
		}
		for i, k := range w.ClearKeys {
			m[k] = w.ClearValues[i]
		}
		for _, k := range w.Delete {
			if _, ok := m[k]; !ok {
				t.Fatalf("deleting %v, which the map lacks", k)
			}
			delete(m, k)
		}
		if got := slotsOf(m); !maps.Equal(got, want) {
			t.Fatalf("the map holds %v, want %v", got, want)
		}
		for k, c := range m {
			if c.empty() {
				t.Fatalf("element %v is empty", k)
			}
		}
	})
}

// A first sync's packed backends (allOps) are what packBackends makes of
// AllOps' slots from empty maps, and allOps counts those slots.
func TestAllOpsPacked(t *testing.T) {
	for _, n := range []int{1, 50, 300} {
		w := scaleworld.New(scalegen.Spec{Services: n})
		c := Render(w.Ruleset, nil)
		o, packed, slots := c.allOps(true)
		all := c.AllOps()
		want, err := packBackends(all.PutBackends, nil, func(chunkKey) (backendChunk, error) { return backendChunk{}, nil })
		if err != nil {
			t.Fatal(err)
		}
		if slots != len(all.PutBackends) || len(o.PutBackends) != 0 || len(o.PutServices) != len(all.PutServices) {
			t.Errorf("N=%d: %d slots, %d slot puts, %d services; want %d, 0, %d", n, slots, len(o.PutBackends), len(o.PutServices), len(all.PutBackends), len(all.PutServices))
		}
		if !slices.Equal(packed.PutKeys, want.PutKeys) || !slices.Equal(packed.PutValues, want.PutValues) {
			t.Errorf("N=%d: allOps packs %d elements, packBackends %d, or other ones", n, len(packed.PutKeys), len(want.PutKeys))
		}
	}
}
