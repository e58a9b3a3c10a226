package nfttrace

import (
	"fmt"
	"slices"
)

// resolve links the rules to the named sets and maps they use and checks
// that every chain a verdict names exists and that every set fits its use.
func (t *Table) resolve() error {
	t.hooks = t.hookChains()
	for _, s := range t.sets {
		for _, e := range s.elems {
			if err := t.checkVerdict(e.value); err != nil {
				return fmt.Errorf("line %d: %s: element %q: %w", e.line, s.name, e.text, err)
			}
		}
	}
	for _, name := range t.order {
		c := t.chains[name]
		if c == nil {
			continue
		}
		for _, r := range c.rules {
			if err := t.resolveRule(r); err != nil {
				return fmt.Errorf("line %d: chain %s: rule %q: %w", r.line, name, r.text, err)
			}
		}
	}
	return nil
}

func (t *Table) checkVerdict(v verdict) error {
	if (v.kind == verdictJump || v.kind == verdictGoto) && t.chains[v.chain] == nil {
		return fmt.Errorf("no chain %s", v.chain)
	}
	return nil
}

func (t *Table) resolveRule(r *rule) error {
	if err := t.checkVerdict(r.verdict); err != nil {
		return err
	}
	for i := range r.exprs {
		e := &r.exprs[i]
		if e.setName != "" {
			s := t.sets[e.setName]
			if s == nil {
				return fmt.Errorf("no set or map %s", e.setName)
			}
			e.set = s
		}
		if e.set == nil {
			if e.kind == exprMatch || e.kind == exprVmap || e.kind == exprUpdate || e.kind == exprDelete || e.kind == exprDnatMap {
				return fmt.Errorf("a set lookup without a set")
			}
			continue
		}
		if err := checkSetUse(e); err != nil {
			return err
		}
		if e.portSetName != "" {
			if e.portSet = t.sets[e.portSetName]; e.portSet == nil {
				return fmt.Errorf("no map %s", e.portSetName)
			}
		}
		if e.kind == exprDnatMap {
			if err := checkDNATMap(t.family, e); err != nil {
				return err
			}
		}
		if e.setName == "" {
			for _, el := range e.set.elems {
				if err := t.checkVerdict(el.value); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkSetUse checks that e's set has the type of its selectors and is a
// verdict map for vmap, a data map for a dnat to a key, a set otherwise.
func checkSetUse(e *expr) error {
	keys := make([]dataType, len(e.sels))
	for i, s := range e.sels {
		keys[i] = s.typ
	}
	if !slices.Equal(keys, e.set.keys) {
		return fmt.Errorf("%s has type %v, used with %v", e.set.name, e.set.keys, keys)
	}
	isDataMap := e.set.isMap && e.set.values != nil
	if e.kind == exprUpdate || e.kind == exprDelete {
		return checkDynamicUse(e, isDataMap)
	}
	if e.set.isMap != (e.kind == exprVmap || e.kind == exprDnatMap) || isDataMap != (e.kind == exprDnatMap) {
		return fmt.Errorf("%s: a map where a set is needed, a set where a map is, or a map of the wrong kind", e.set.name)
	}
	return nil
}

// checkDynamicUse checks that the set an update or delete writes is a set
// (and the statement has no value) or a data map of the value's type.
func checkDynamicUse(e *expr, isDataMap bool) error {
	vals := make([]dataType, len(e.vals))
	for i, s := range e.vals {
		vals[i] = s.typ
	}
	switch {
	case !e.set.isMap && len(e.vals) == 0:
		return nil
	case isDataMap && slices.Equal(vals, e.set.values):
		return nil
	}
	return fmt.Errorf("%s: an element of value type %v, in a set or map whose values are %v", e.set.name, vals, e.set.values)
}
