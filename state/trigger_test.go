package state_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/state"
)

// TestTriggerTimes: a Snapshot hands out every last-change-trigger-time
// recorded since the previous one (fractions of a second kept), each once;
// the time a slice already had is not a new change (a relist, a manifest
// reload); a deleted slice's pending times are dropped.
func TestTriggerTimes(t *testing.T) {
	at := func(sec, nsec int) time.Time { return time.Date(2026, 12, 1, 10, 0, sec, nsec, time.UTC) }
	// An event is the slice "a" or "b" with a trigger annotation, "delete a",
	// or "snapshot" (the times it hands out are checked against want).
	type event struct {
		slice, trigger string
		deleted        bool
		snapshot       bool
		want           []time.Time
	}
	for _, tt := range []struct {
		name   string
		events []event
	}{
		{"whole seconds and fractions", []event{
			{slice: "a", trigger: "2026-12-01T10:00:01Z"},
			{slice: "b", trigger: "2026-12-01T10:00:00.250000001Z"},
			{snapshot: true, want: []time.Time{at(0, 250000001), at(1, 0)}},
			{snapshot: true},
		}},
		{"every change of a slice between two snapshots", []event{
			{slice: "a", trigger: "2026-12-01T10:00:01Z"},
			{slice: "a", trigger: "2026-12-01T10:00:02.5Z"},
			{snapshot: true, want: []time.Time{at(1, 0), at(2, 500000000)}},
		}},
		{"the same time again is no change", []event{
			{slice: "a", trigger: "2026-12-01T10:00:01Z"},
			{slice: "a", trigger: "2026-12-01T10:00:01Z"},
			{snapshot: true, want: []time.Time{at(1, 0)}},
			{slice: "a", trigger: "2026-12-01T10:00:01Z"},
			{snapshot: true},
			{slice: "a", trigger: "2026-12-01T10:00:03Z"},
			{snapshot: true, want: []time.Time{at(3, 0)}},
		}},
		{"a deleted slice's times are dropped", []event{
			{slice: "a", trigger: "2026-12-01T10:00:01Z"},
			{slice: "b", trigger: "2026-12-01T10:00:02Z"},
			{slice: "a", deleted: true},
			{snapshot: true, want: []time.Time{at(2, 0)}},
			{slice: "a", trigger: "2026-12-01T10:00:01Z"},
			{snapshot: true, want: []time.Time{at(1, 0)}},
		}},
		{"no annotation, or a bad one", []event{
			{slice: "a"},
			{slice: "b", trigger: "yesterday"},
			{snapshot: true},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, v4)
			for i, ev := range tt.events {
				switch {
				case ev.snapshot:
					if diff := cmp.Diff(ev.want, s.Snapshot().TriggerTimes); diff != "" {
						t.Errorf("event %d: trigger times (-want +got):\n%s", i, diff)
					}
				case ev.deleted:
					s.DeleteSlice("ns", ev.slice)
				default:
					es := slice("svc", ev.slice, "198.18.1.1")
					if ev.trigger != "" {
						es.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: ev.trigger}
					}
					warnings := s.UpdateSlice(es)
					if bad := ev.trigger == "yesterday"; bad != (len(warnings) == 1) {
						t.Errorf("event %d: warnings %v", i, warnings)
					}
				}
			}
		})
	}
}

// TestTriggerTimesByFamily: each family's part of a Snapshot has the
// trigger times of its own EndpointSlices, and a Builder's build hands
// them out by family (kept, like the others, past a failed build).
func TestTriggerTimesByFamily(t *testing.T) {
	s := newState(t, dualStack...)
	for _, es := range []struct{ name, addr, at string }{
		{"four", "198.18.1.1", "2026-12-01T10:00:01Z"},
		{"six", "2001:db8:18::1", "2026-12-01T10:00:02Z"},
		{"six-b", "2001:db8:18::2", "2026-12-01T10:00:03Z"},
	} {
		slice := slice("svc", es.name, es.addr)
		slice.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: es.at}
		s.UpdateSlice(slice)
	}
	at := func(sec int) time.Time { return time.Date(2026, 12, 1, 10, 0, sec, 0, time.UTC) }
	snap := s.Snapshot()
	got := map[v1.IPFamily][]time.Time{}
	for _, fam := range snap.Families() {
		got[fam.IPFamily] = fam.TriggerTimes
	}
	want := map[v1.IPFamily][]time.Time{v4: {at(1)}, v6: {at(2), at(3)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("trigger times by family (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]time.Time{at(1), at(2), at(3)}, snap.TriggerTimes); diff != "" {
		t.Errorf("all trigger times (-want +got):\n%s", diff)
	}
	config, err := state.ConfigFrom(ruleset.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := state.NewBuilder(config)
	if err != nil {
		t.Fatal(err)
	}
	built, err := b.Build(snap)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, built.TriggersByFamily); diff != "" {
		t.Errorf("Built.TriggersByFamily (-want +got):\n%s", diff)
	}
}
