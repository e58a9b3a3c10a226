package ruleset

import (
	"math"
	"math/big"
)

// Pick returns the choice that a new flow goes to, given x, a number the
// caller draws uniformly from [0, 1): walking choices in order, the first
// whose Share, added to the Shares before it, exceeds x. The sums are
// exact, so with x uniform each choice is picked with exactly its Share
// (up to x's own resolution). An x below 0 (or NaN) picks the first
// choice; an x at or above the sum of the Shares picks the last. A nil
// Share counts as 0. Pick returns the zero Choice (whose Endpoint is not
// valid) when choices is empty.
func Pick(choices []Choice, x float64) Choice {
	if len(choices) == 0 {
		return Choice{}
	}
	if math.IsNaN(x) || x < 0 {
		return choices[0]
	}
	if math.IsInf(x, 1) {
		return choices[len(choices)-1]
	}
	point, sum := new(big.Rat).SetFloat64(x), new(big.Rat)
	for _, c := range choices[:len(choices)-1] {
		if c.Share != nil {
			sum.Add(sum, c.Share)
		}
		if point.Cmp(sum) < 0 {
			return c
		}
	}
	return choices[len(choices)-1]
}
