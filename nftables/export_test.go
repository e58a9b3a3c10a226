package nftables

import (
	"fmt"
	"slices"

	"github.com/svcproxy/svcproxy/ruleset"
)

// CheckKernel exposes checkKernel to the tests.
var CheckKernel = checkKernel

// CheckFrontends reports an element of a Service port of rs whose frontend
// is not among the port's Frontends: RenderChanges would miss its owner.
func CheckFrontends(rs *ruleset.Ruleset) error {
	r, err := newRenderer(rs.Config(), Options{})
	if err != nil {
		return err
	}
	for _, s := range rs.Services() {
		fs := s.Frontends()
		r.elements(s, func(k elemKey, _ verdict) {
			if err == nil && !slices.Contains(fs, k.frontend()) {
				err = fmt.Errorf("%v: element %+v not on any of its Frontends %v", s.Name, k, fs)
			}
		})
	}
	return err
}
