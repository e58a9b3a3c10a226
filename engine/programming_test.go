package engine

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
)

// TestNetworkProgrammingLatency: each change time a Provider gives is
// observed once, by the first sync that succeeds, as the time from it to
// that sync's end; a change time before the Engine was made is not
// observed (kube-proxy's rule: it measures the wait for the proxy's start),
// nor one after the end of the sync that gets it.
func TestNetworkProgrammingLatency(t *testing.T) {
	type step struct {
		advance  time.Duration   // the clock moves, then the sync runs
		triggers []time.Duration // change times the Provider gives, from the Engine's start
		fail     bool            // the backend fails this sync
	}
	for _, tt := range []struct {
		name  string
		steps []step
		want  observed
	}{
		{
			name:  "changes after the start, one sync",
			steps: []step{{advance: 5 * time.Second, triggers: []time.Duration{0, 2 * time.Second, 4500 * time.Millisecond}}},
			want:  observed{Count: 3, Sum: 5 + 3 + 0.5},
		},
		{
			name:  "changes before the start are not observed",
			steps: []step{{advance: time.Second, triggers: []time.Duration{-10 * time.Minute, -time.Nanosecond, 0}}},
			want:  observed{Count: 1, Sum: 1},
		},
		{
			name: "a failed sync keeps the change times for the next success",
			steps: []step{
				{advance: time.Second, triggers: []time.Duration{500 * time.Millisecond}, fail: true},
				{advance: 2 * time.Second, triggers: []time.Duration{2 * time.Second}},
				{advance: time.Second},
			},
			want: observed{Count: 2, Sum: 2.5 + 1},
		},
		{
			name:  "a change time after the sync's end (a clock ahead) is not observed",
			steps: []step{{advance: time.Second, triggers: []time.Duration{3 * time.Second}}, {advance: 2 * time.Second}},
			want:  observed{},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			start := clock.Now()
			var given []time.Time
			w := newWorld(t)
			source := ProviderFunc(func(ctx context.Context) (Desired, error) {
				d, err := w.Desired(ctx)
				d.Triggers, given = given, nil
				return d, err
			})
			reg := prometheus.NewPedanticRegistry()
			b := &fakeBackend{}
			e, err := New(Config{Backends: map[v1.IPFamily]Backend{v1.IPv4Protocol: b}, Provider: source, Registerer: reg, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.steps {
				clock.advance(s.advance)
				for _, d := range s.triggers {
					given = append(given, start.Add(d))
				}
				if s.fail {
					b.failNext = 1
				}
				if err := e.Sync(context.Background()); (err != nil) != s.fail {
					t.Fatalf("sync error %v, want failure %v", err, s.fail)
				}
			}
			if diff := cmp.Diff(tt.want, observedProgramming(t, reg)); diff != "" {
				t.Errorf("observed latencies (-want +got):\n%s", diff)
			}
		})
	}
}

// observedProgramming returns the number and the sum, in seconds, of the
// network-programming latencies observed.
func observedProgramming(t *testing.T, reg *prometheus.Registry) observed {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == "kubeproxy_network_programming_duration_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			return observed{Count: h.GetSampleCount(), Sum: h.GetSampleSum()}
		}
	}
	t.Fatal("no kubeproxy_network_programming_duration_seconds")
	return observed{}
}

// observed is what a histogram says of its observations.
type observed struct {
	Count uint64
	Sum   float64
}

// TestNetworkProgrammingBuckets: the latency histogram has kube-proxy's
// bucket bounds, so that an objective in whole seconds is read at a bound.
func TestNetworkProgrammingBuckets(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if _, err := New(Config{Backends: map[v1.IPFamily]Backend{v1.IPv4Protocol: &fakeBackend{}}, Provider: newWorld(t), Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []float64
	for _, mf := range families {
		if mf.GetName() == "kubeproxy_network_programming_duration_seconds" {
			for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
				got = append(got, b.GetUpperBound())
			}
		}
	}
	want := []float64{0.25, 0.5}
	for s := 1; s <= 59; s++ {
		want = append(want, float64(s))
	}
	for s := 60; s <= 115; s += 5 {
		want = append(want, float64(s))
	}
	for s := 120; s <= 300; s += 30 {
		want = append(want, float64(s))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bucket bounds (-want +got):\n%s", diff)
	}
}
