package ruleset_test

import (
	"fmt"
	"math/big"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/ruleset"
)

// reach returns the probability, for each target of a list whose target i
// is taken with probability p[i] when reached, that traffic ends there.
func reach(p []*big.Rat) []*big.Rat {
	out := make([]*big.Rat, len(p))
	left := big.NewRat(1, 1) // probability of reaching target i
	for i := range p {
		out[i] = new(big.Rat).Mul(left, p[i])
		left.Mul(left, new(big.Rat).Sub(big.NewRat(1, 1), p[i]))
	}
	return out
}

// decimal is the probability an iptables rule matches for a target that
// remaining targets (itself and those after it) are left to, as the
// renderer writes it: "%0.10f" of 1/remaining, and no probability (always)
// for the last target.
func decimal(remaining int) *big.Rat {
	if remaining == 1 {
		return big.NewRat(1, 1)
	}
	r, ok := new(big.Rat).SetString(fmt.Sprintf("%0.10f", 1/float64(remaining)))
	if !ok {
		panic("unparsable decimal")
	}
	return r
}

// kernel is the probability the kernel applies for decimal p: iptables'
// statistic match stores lround(p·2^31) and matches when a random 31-bit
// number is below it.
func kernel(p *big.Rat) *big.Rat {
	if p.Cmp(big.NewRat(1, 1)) == 0 {
		return p // the last target has no statistic match
	}
	scale := new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 31))
	x := new(big.Rat).Mul(p, scale)
	// round half away from zero, as lround does (x ≥ 0)
	n := new(big.Int).Quo(new(big.Int).Add(new(big.Int).Mul(x.Num(), big.NewInt(2)), x.Denom()), new(big.Int).Mul(x.Denom(), big.NewInt(2)))
	return new(big.Rat).Quo(new(big.Rat).SetInt(n), scale)
}

func absDiff(a, b *big.Rat) *big.Rat { return new(big.Rat).Abs(new(big.Rat).Sub(a, b)) }

// Error bounds. A decimal with 10 places is within 5e-11 of 1/(N−i) (plus
// the float64 error of 1/(N−i), below 1e-16), and the kernel's
// lround(p·2^31)/2^31 within 2^-32 of the decimal: each stored per-rule
// probability is off by at most δ = 5e-11 + 2^-32 ≈ 2.83e-10 (the last
// target's, always 1, by nothing). To first order, target i of N is reached
// with an error of at most δ·((N−i)/N + Σ_{j<i} R_j/(R_j−1)/N) (R_j =
// N−j ≥ 2): the first term from its own rule, the sum from the rules before
// it. That factor is at most (N−1)/N + H_{N−1}/N, largest at N = 5 with
// 1.2167; the second-order terms are below (Nδ)² ≈ 1e-15. So the kernel
// probabilities are within 1.25·δ < 3.6e-10 of 1/N, and the decimals alone
// within 1.25·5e-11.
var (
	decimalBound = mustRat("6.3e-11")
	kernelBound  = new(big.Rat).Mul(big.NewRat(5, 4), new(big.Rat).Add(mustRat("5e-11"), big.NewRat(1, 1<<32)))
	issueBound   = mustRat("1e-9")
)

func mustRat(s string) *big.Rat {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		panic(s)
	}
	return r
}

// checkProbabilities checks that each target of ts is reached with
// probability exactly 1/N, and with the rendered and the kernel's
// probabilities within the bounds above; it returns the largest deviation of
// each.
func checkProbabilities(t interface {
	Helper()
	Fatalf(string, ...any)
}, ts []ruleset.Target) (maxDecimal, maxKernel *big.Rat) {
	t.Helper()
	n := len(ts)
	want := big.NewRat(1, int64(n))
	var exact, dec, kern []*big.Rat
	for i := range ts {
		exact = append(exact, ruleset.Probability(i, n))
		dec = append(dec, decimal(n-i))
		kern = append(kern, kernel(decimal(n-i)))
	}
	maxDecimal, maxKernel = new(big.Rat), new(big.Rat)
	sum := new(big.Rat)
	for i, r := range reach(exact) {
		if r.Cmp(want) != 0 {
			t.Fatalf("N=%d: target %d reached with probability %v, want exactly %v", n, i, r, want)
		}
		sum.Add(sum, r)
	}
	if sum.Cmp(big.NewRat(1, 1)) != 0 {
		t.Fatalf("N=%d: probabilities sum to %v", n, sum)
	}
	for i, r := range reach(dec) {
		d := absDiff(r, want)
		if d.Cmp(decimalBound) > 0 || d.Cmp(issueBound) > 0 {
			f, _ := d.Float64()
			t.Fatalf("N=%d: target %d reached with rendered probability %s, %.3g from 1/N", n, i, r.FloatString(15), f)
		}
		if d.Cmp(maxDecimal) > 0 {
			maxDecimal = d
		}
	}
	for i, r := range reach(kern) {
		d := absDiff(r, want)
		if d.Cmp(kernelBound) > 0 || d.Cmp(issueBound) > 0 {
			f, _ := d.Float64()
			t.Fatalf("N=%d: target %d reached with kernel probability %s, %.3g from 1/N", n, i, r.FloatString(15), f)
		}
		if d.Cmp(maxKernel) > 0 {
			maxKernel = d
		}
	}
	return maxDecimal, maxKernel
}

// For every N from 1 to 100, a Service with N endpoints gives each endpoint
// probability exactly 1/N, and its rendered probabilities nearly so.
func TestProbabilities(t *testing.T) {
	maxDec, maxKern := new(big.Rat), new(big.Rat)
	var argDec, argKern int
	for n := 1; n <= 100; n++ {
		var eps []ep
		for i := range n {
			eps = append(eps, ep{ip: fmt.Sprintf("198.18.%d.%d", 1+i/50, 1+(i*37)%50), node: genNodes[1+i%3]})
		}
		rs := build(t, v4Config(), []*v1.Service{service("ns", "web", "198.19.0.10", nodePort, eTPLocal)},
			[]*discovery.EndpointSlice{endpointSlice("ns", "web", "web-1", eps...)})
		s, _ := rs.Service(webPort("ns", "web"))
		if len(s.ClusterTargets) != n {
			t.Fatalf("N=%d: %d cluster targets", n, len(s.ClusterTargets))
		}
		for _, ts := range [][]ruleset.Target{s.ClusterTargets, s.LocalTargets} {
			d, k := checkProbabilities(t, ts)
			if d.Cmp(maxDec) > 0 {
				maxDec, argDec = d, len(ts)
			}
			if k.Cmp(maxKern) > 0 {
				maxKern, argKern = k, len(ts)
			}
		}
	}
	fd, _ := maxDec.Float64()
	fk, _ := maxKern.Float64()
	bound, _ := kernelBound.Float64()
	t.Logf("largest deviation from 1/N, N ≤ 100: rendered decimals %.4g (N=%d), kernel round(p·2^31)/2^31 %.4g (N=%d); bound %.3g",
		fd, argDec, fk, argKern, bound)
}

// Property: whatever the endpoints, both target lists give each target
// probability 1/N.
func TestPropProbabilities(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		_, _, rs, _ := genBuilt(t)
		for _, s := range rs.Services() {
			for _, ts := range [][]ruleset.Target{s.ClusterTargets, s.LocalTargets} {
				if len(ts) > 0 {
					checkProbabilities(t, ts)
				}
			}
		}
	})
}
