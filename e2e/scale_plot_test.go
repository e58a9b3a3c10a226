//go:build scale && linux

package e2e

import (
	"fmt"
	"html"
	"math"
	"strings"
	"testing"
	"time"
)

// cdfSeries is one line of a CDF plot: a name and its sorted samples.
type cdfSeries struct {
	name   string
	sorted []time.Duration
}

// The plot's geometry, in SVG user units.
const (
	plotWidth, plotHeight = 860, 480
	plotLeft, plotRight   = 70, 250 // the legend is on the right
	plotTop, plotBottom   = 40, 50
)

// plotColors are the lines' colours, in order (distinguishable in colour
// and in grey).
var plotColors = []string{"#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#a6761d", "#666666", "#e6ab02"}

// cdfSVG draws the series' cumulative distributions on a logarithmic time
// axis, in decades from 1 ms (or below, to the smallest sample) to the
// largest sample, as an SVG document.
func cdfSVG(title string, series []cdfSeries) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		if len(s.sorted) == 0 {
			continue
		}
		lo = math.Min(lo, s.sorted[0].Seconds())
		hi = math.Max(hi, s.sorted[len(s.sorted)-1].Seconds())
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1e-3, 1
	}
	minDecade := math.Min(-3, math.Floor(math.Log10(math.Max(lo, 1e-6))))
	maxDecade := math.Max(minDecade+1, math.Ceil(math.Log10(math.Max(hi, 1e-6))))
	w := float64(plotWidth - plotLeft - plotRight)
	h := float64(plotHeight - plotTop - plotBottom)
	x := func(sec float64) float64 {
		v := (math.Log10(math.Max(sec, math.Pow(10, minDecade))) - minDecade) / (maxDecade - minDecade)
		return plotLeft + v*w
	}
	y := func(frac float64) float64 { return plotTop + (1-frac)*h }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotWidth, plotHeight, plotWidth, plotHeight)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotWidth, plotHeight)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14">%s</text>`+"\n", plotLeft, html.EscapeString(title))
	for d := minDecade; d <= maxDecade; d++ {
		px := x(math.Pow(10, d))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", px, plotTop, px, y(0))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px, y(0)+18, decadeLabel(d))
	}
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 0.9, 0.99, 1} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", plotLeft, y(f), x(math.Pow(10, maxDecade)), y(f))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", plotLeft-6, y(f)+4, f)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">latency (log scale)</text>`+"\n", plotLeft+w/2, plotHeight-10)
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">fraction of changes</text>`+"\n", plotTop+h/2)
	for k, s := range series {
		color := plotColors[k%len(plotColors)]
		if len(s.sorted) > 0 {
			var pts []string
			prev := 0.0
			for i, d := range s.sorted {
				px := x(d.Seconds())
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, y(prev)), fmt.Sprintf("%.1f,%.1f", px, y(float64(i+1)/float64(len(s.sorted)))))
				prev = float64(i+1) / float64(len(s.sorted))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		}
		ly := plotTop + 10 + 22*k
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", plotWidth-plotRight+20, ly, plotWidth-plotRight+44, ly, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", plotWidth-plotRight+50, ly+4, html.EscapeString(s.name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// decadeLabel names 10^d seconds: "1 ms", "10 ms", "100 ms", "1 s", "10 s", …
func decadeLabel(d float64) string {
	v := math.Pow(10, d)
	switch {
	case v < 1e-3:
		return fmt.Sprintf("%g µs", math.Round(v*1e6))
	case v < 1:
		return fmt.Sprintf("%g ms", math.Round(v*1e3))
	}
	return fmt.Sprintf("%g s", v)
}

func TestCDFSVG(t *testing.T) {
	ms := time.Millisecond
	svg := cdfSVG("a & b", []cdfSeries{
		{name: "fast", sorted: []time.Duration{2 * ms, 3 * ms, 40 * ms}},
		{name: "slow <x>", sorted: []time.Duration{900 * ms, 12 * time.Second}},
		{name: "empty"},
	})
	for _, want := range []string{"a &amp; b", "slow &lt;x&gt;", ">1 ms<", ">100 s<", "empty"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the plot has no %q:\n%s", want, svg)
		}
	}
	if got := strings.Count(svg, "<polyline"); got != 2 {
		t.Errorf("%d lines, want 2 (the empty series has none)", got)
	}
	// The fast series' steps: 2 samples a step, x growing, y from the
	// bottom (0) to the top (1).
	start := strings.Index(svg, `points="`) + len(`points="`)
	pts := strings.Fields(svg[start : start+strings.Index(svg[start:], `"`)])
	if len(pts) != 6 {
		t.Fatalf("fast series: %d points, want 6: %v", len(pts), pts)
	}
	var lastX float64
	for i, p := range pts {
		var px, py float64
		if _, err := fmt.Sscanf(p, "%f,%f", &px, &py); err != nil {
			t.Fatal(err)
		}
		if px < lastX {
			t.Errorf("point %d: x %v after %v", i, px, lastX)
		}
		lastX = px
		if i == 0 && py != plotHeight-plotBottom || i == len(pts)-1 && py != plotTop {
			t.Errorf("point %d: y %v", i, py)
		}
	}
}
