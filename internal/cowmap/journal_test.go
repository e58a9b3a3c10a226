package cowmap_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/svcproxy/svcproxy/internal/cowmap"
)

// key is a Journal's key in these tests.
type key string

func (a key) Compare(b key) int { return strings.Compare(string(a), string(b)) }

func TestJournal(t *testing.T) {
	a, b := key("a"), key("b")
	type change struct{ Before, After int }
	tests := []struct {
		name    string
		ops     func(j *cowmap.Journal[key, int])
		pending int
		want    map[key]change
	}{
		{"set", func(j *cowmap.Journal[key, int]) { j.Set(a, 1) }, 1, map[key]change{a: {0, 1}}},
		{"set then delete is forgotten", func(j *cowmap.Journal[key, int]) { j.Set(a, 1); j.Delete(a) }, 0, map[key]change{}},
		{"committed value set again is forgotten", func(j *cowmap.Journal[key, int]) { j.Set(b, 5); j.Set(b, 7); j.Set(b, 2) }, 0, map[key]change{}},
		{"delete of a committed key", func(j *cowmap.Journal[key, int]) { j.Delete(b) }, 1, map[key]change{b: {2, 0}}},
		{"delete of an unknown key", func(j *cowmap.Journal[key, int]) { j.Delete(a) }, 0, map[key]change{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := cowmap.NewJournal[key](func(x, y int) bool { return x == y })
			j.Set(b, 2)
			j.Commit(func(key, int, int) {})
			tt.ops(j)
			if got := j.Pending(); got != tt.pending {
				t.Errorf("Pending() = %d, want %d", got, tt.pending)
			}
			got := map[key]change{}
			m := j.Commit(func(key key, before, after int) { got[key] = change{before, after} })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Commit changes (-want +got):\n%s", diff)
			}
			if m.Len() != j.Current().Len() || j.Pending() != 0 {
				t.Errorf("after Commit: %d keys returned, %d current, %d pending", m.Len(), j.Current().Len(), j.Pending())
			}
			again := 0
			j.Commit(func(key, int, int) { again++ })
			if again != 0 {
				t.Errorf("a second Commit reported %d changes", again)
			}
		})
	}
}
