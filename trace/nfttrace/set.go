package nfttrace

import (
	"fmt"
	"slices"
	"strings"
)

// addSet adds a set or map (if new) and reads its block: type, flags,
// timeout, and (as listed) its elements.
func (t *Table) addSet(at token, name string, isMap bool, block []token) error {
	s := t.sets[name]
	if s == nil {
		s = &set{name: name, isMap: isMap}
		t.sets[name] = s
	}
	if len(block) > 0 && block[0].is("{") {
		inside, after, err := braced(block)
		if err != nil || len(after) > 0 {
			return lineError(at, "%s: want its specification in braces", name)
		}
		block = inside
	}
	for _, st := range statements(block) {
		if err := s.parseSpec(t.family, st); err != nil {
			return err
		}
	}
	if s.keys == nil {
		return lineError(at, "%s: no type", name)
	}
	return nil
}

// parseSpec reads one statement of a set's specification in a table of
// family.
func (s *set) parseSpec(family string, st []token) error {
	kw := st[0]
	switch {
	case kw.is("type") || kw.is("typeof"):
		parse := parseSetType
		if kw.is("typeof") {
			parse = func(toks []token) (setType, error) { return parseTypeof(family, toks) }
		}
		typ, err := parse(st[1:])
		if err != nil {
			return lineError(kw, "%s: %v", s.name, err)
		}
		if typ.isMap != s.isMap {
			return lineError(kw, "%s: type %q does not fit a %s", s.name, words(st[1:]), map[bool]string{true: "map", false: "set"}[s.isMap])
		}
		s.keys, s.values = typ.keys, typ.values
	case kw.is("timeout") && len(st) == 2:
		d, err := parseDuration(st[1].text)
		if err != nil {
			return lineError(kw, "%s: %v", s.name, err)
		}
		s.timeout = d
	case kw.is("flags") || kw.is("size") || kw.is("comment") || kw.is("policy") || kw.is("gc-interval") || kw.is("auto-merge"):
	case kw.is("elements") && len(st) > 2 && st[1].is("="):
		inside, after, err := braced(st[2:])
		if err != nil || len(after) > 0 {
			return lineError(kw, "%s: want the elements in braces", s.name)
		}
		return s.changeElements(kw, inside, true)
	default:
		return lineError(kw, "%s: unknown %q", s.name, words(st))
	}
	return nil
}

// setType is the type of a set or map: its key fields, and for a data map
// (values non-nil) the fields of its values; a verdict map has none.
type setType struct {
	keys, values []dataType
	isMap        bool
}

// parseSetType reads "A . B . C [: verdict | : D . E]".
func parseSetType(toks []token) (setType, error) {
	key, value, isMap := splitColon(toks)
	var typ setType
	var err error
	if typ.keys, err = dataTypeList(key); err != nil {
		return setType{}, fmt.Errorf("unknown set type %q", words(toks))
	}
	typ.isMap = isMap
	if !isMap || len(value) == 1 && value[0].is("verdict") {
		return typ, nil
	}
	if typ.values, err = dataTypeList(value); err != nil {
		return setType{}, fmt.Errorf("unknown map value type %q", words(toks))
	}
	return typ, nil
}

// splitColon splits a set's type at its colon, if any.
func splitColon(toks []token) (key, value []token, isMap bool) {
	for i, t := range toks {
		if t.is(":") {
			return toks[:i], toks[i+1:], true
		}
	}
	return toks, nil, false
}

// dataTypeList reads "A . B . C", data type names.
func dataTypeList(toks []token) ([]dataType, error) {
	var out []dataType
	for i, t := range toks {
		switch {
		case t.is(".") && i%2 == 1 && i < len(toks)-1:
		case i%2 == 0 && !t.quoted && dataTypes[t.text] != 0:
			out = append(out, dataTypes[t.text])
		default:
			return nil, fmt.Errorf("unknown data type %q", t.text)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty type")
	}
	return out, nil
}

// changeElements adds (or deletes) the comma-separated elements of toks.
func (s *set) changeElements(at token, toks []token, add bool) error {
	for _, et := range splitCommas(stripNewlines(toks)) {
		if len(et) == 0 {
			continue
		}
		e, err := parseElement(s, et)
		if err != nil {
			return lineError(et[0], "%s: %v", s.name, err)
		}
		old := s.lookupExactly(e)
		switch {
		case add && old == nil:
			s.insert(e)
		case add:
			s.remove(old)
			s.insert(e)
		case old != nil:
			s.remove(old)
		default:
			return lineError(et[0], "%s: no element %s to delete", s.name, e.text)
		}
	}
	return nil
}

// lookupExactly finds the element with exactly e's key.
func (s *set) lookupExactly(e *element) *element {
	if key, ok := e.single(); ok {
		return s.exact[keyString(key)]
	}
	for _, o := range s.ranged {
		if slices.Equal(o.key, e.key) {
			return o
		}
	}
	return nil
}

func (s *set) insert(e *element) {
	s.elems = append(s.elems, e)
	if key, ok := e.single(); ok {
		if s.exact == nil {
			s.exact = map[string]*element{}
		}
		s.exact[keyString(key)] = e
		return
	}
	s.ranged = append(s.ranged, e)
}

func (s *set) remove(e *element) {
	is := func(o *element) bool { return o == e }
	s.elems = slices.DeleteFunc(s.elems, is)
	s.ranged = slices.DeleteFunc(s.ranged, is)
	if key, ok := e.single(); ok {
		delete(s.exact, keyString(key))
	}
}

// splitCommas splits toks at the commas outside braces.
func splitCommas(toks []token) [][]token {
	var out [][]token
	depth, start := 0, 0
	for i, t := range toks {
		switch {
		case t.is("{"):
			depth++
		case t.is("}"):
			depth--
		case t.is(",") && depth == 0:
			out = append(out, toks[start:i])
			start = i + 1
		}
	}
	return append(out, toks[start:])
}

// parseElement reads an element of s: "K1 . K2 [comment C] [timeout T]
// [expires E] [: VERDICT | : V1 . V2]".
func parseElement(s *set, toks []token) (*element, error) {
	keys, isMap := s.keys, s.isMap
	e := &element{text: words(toks), line: toks[0].line}
	i := 0
	for k, typ := range keys {
		if k > 0 {
			if i >= len(toks) || !toks[i].is(".") {
				return nil, fmt.Errorf("element %q: want %d fields", e.text, len(keys))
			}
			i++
		}
		if i >= len(toks) {
			return nil, fmt.Errorf("element %q: want %d fields", e.text, len(keys))
		}
		iv, err := parseLiteral(typ, toks[i].text)
		if err != nil {
			return nil, fmt.Errorf("element %q: %w", e.text, err)
		}
		e.key = append(e.key, iv)
		i++
	}
	for i < len(toks) && !toks[i].is(":") {
		n, err := elementOption(toks[i:], e)
		if err != nil {
			return nil, fmt.Errorf("element %q: %w", e.text, err)
		}
		i += n
	}
	if !isMap {
		if i < len(toks) {
			return nil, fmt.Errorf("element %q: a value in a set", e.text)
		}
		return e, nil
	}
	if i == len(toks) {
		return nil, fmt.Errorf("element %q: no value in a map", e.text)
	}
	if s.values != nil {
		data, err := parseData(s.values, toks[i+1:])
		if err != nil {
			return nil, fmt.Errorf("element %q: %w", e.text, err)
		}
		e.data = data
		return e, nil
	}
	v, n, ok, err := parseVerdict(toks[i+1:])
	if err != nil || !ok || i+1+n != len(toks) {
		return nil, fmt.Errorf("element %q: the value is no verdict (%v)", e.text, err)
	}
	e.value = v
	return e, nil
}

// elementOption reads one option of an element: its comment, timeout,
// expiry or counter; it returns the number of tokens it took.
func elementOption(toks []token, e *element) (int, error) {
	switch {
	case toks[0].is("comment") && len(toks) > 1:
		e.comment = toks[1].text
		return 2, nil
	case (toks[0].is("timeout") || toks[0].is("expires")) && len(toks) > 1:
		return 2, nil
	case toks[0].is("counter") && len(toks) > 4 && toks[1].is("packets") && toks[3].is("bytes"):
		return 5, nil
	}
	return 0, fmt.Errorf("unknown %q", strings.TrimSpace(words(toks[:1])))
}
