//go:build scale && linux

package e2e

import (
	"math"
	"testing"
)

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	bounds := []float64{1, 2, 4, inf}
	tests := []struct {
		name   string
		counts []uint64 // cumulative, per bound
		q      float64
		want   float64
	}{
		{name: "first bucket interpolates from 0", counts: []uint64{10, 10, 10, 10}, q: 0.5, want: 0.5},
		{name: "middle of the second bucket", counts: []uint64{0, 10, 10, 10}, q: 0.5, want: 1.5},
		{name: "rank on a bucket's upper edge", counts: []uint64{5, 10, 10, 10}, q: 0.5, want: 1},
		{name: "p99 in the third bucket", counts: []uint64{50, 50, 100, 100}, q: 0.99, want: 2 + 2*0.98},
		{name: "in +Inf: the largest finite bound", counts: []uint64{0, 0, 1, 100}, q: 0.99, want: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := histogram{bounds: bounds, counts: tc.counts, count: tc.counts[len(tc.counts)-1]}
			if got := h.quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	if got := (histogram{bounds: bounds, counts: []uint64{0, 0, 0, 0}}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("quantile of no observations = %v, want NaN", got)
	}
}

func TestHistogramMinus(t *testing.T) {
	bounds := []float64{1, math.Inf(1)}
	before := histogram{bounds: bounds, counts: []uint64{3, 5}, count: 5}
	after := histogram{bounds: bounds, counts: []uint64{4, 9}, count: 9}
	d := after.minus(before)
	if d.count != 4 || d.counts[0] != 1 || d.counts[1] != 4 {
		t.Errorf("minus = %+v, want count 4, counts [1 4]", d)
	}
}
