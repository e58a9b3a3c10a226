package nfttrace

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// jsonObject is one object of `nft -j list table` output: its kind
// ("table", "chain", "set", "map", "rule", "element") and its body.
type jsonObject = map[string]map[string]any

// parseJSON reads `nft -j list table`: it writes each object as the command
// that makes it, and reads those. An error names the object (its kind,
// chain and handle) rather than a line.
func parseJSON(text string) (*Table, error) {
	var doc struct {
		Nftables []jsonObject `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		return nil, fmt.Errorf("nfttrace: JSON: %w", err)
	}
	var lines, origins []string
	for i, o := range doc.Nftables {
		for kind, body := range o {
			origin := jsonOrigin(i, kind, body)
			cmds, err := jsonCommands(kind, body)
			if err != nil {
				return nil, fmt.Errorf("nfttrace: JSON %s: %w", origin, err)
			}
			for _, c := range cmds {
				lines, origins = append(lines, c), append(origins, origin)
			}
		}
	}
	t, err := Parse(strings.Join(lines, "\n"))
	if err != nil {
		return nil, jsonError(err, origins)
	}
	return t, nil
}

func jsonOrigin(i int, kind string, body map[string]any) string {
	s := fmt.Sprintf("object %d (%s", i, kind)
	if c, ok := body["chain"].(string); ok {
		s += " in chain " + c
	} else if n, ok := body["name"].(string); ok {
		s += " " + n
	}
	if h, ok := body["handle"].(float64); ok {
		s += fmt.Sprintf(", handle %d", int64(h))
	}
	return s + ")"
}

var lineRef = regexp.MustCompile(`line ([0-9]+): `)

// jsonError names the JSON object of the command line an error is about.
func jsonError(err error, origins []string) error {
	msg := err.Error()
	m := lineRef.FindStringSubmatchIndex(msg)
	if m == nil {
		return err
	}
	n, _ := strconv.Atoi(msg[m[2]:m[3]])
	if n < 1 || n > len(origins) {
		return err
	}
	return fmt.Errorf("%sJSON %s: %s", msg[:m[0]], origins[n-1], msg[m[1]:])
}

// jsonCommands writes one JSON object as commands.
func jsonCommands(kind string, b map[string]any) ([]string, error) {
	family, _ := b["family"].(string)
	name, _ := b["name"].(string)
	table, _ := b["table"].(string)
	switch kind {
	case "metainfo":
		return nil, nil
	case "table":
		return []string{fmt.Sprintf("add table %s %s", family, name)}, nil
	case "chain":
		return []string{jsonChain(family, table, name, b)}, nil
	case "set", "map":
		return jsonSet(kind, family, table, name, b)
	case "rule":
		chain, _ := b["chain"].(string)
		exprs, _ := b["expr"].([]any)
		var words []string
		for _, e := range exprs {
			w, err := jsonStatement(e)
			if err != nil {
				return nil, err
			}
			words = append(words, w)
		}
		if c, ok := b["comment"].(string); ok {
			words = append(words, "comment "+strconv.Quote(c))
		}
		return []string{fmt.Sprintf("add rule %s %s %s %s", family, table, chain, strings.Join(words, " "))}, nil
	}
	return nil, fmt.Errorf("unknown object %q", kind)
}

func jsonChain(family, table, name string, b map[string]any) string {
	cmd := fmt.Sprintf("add chain %s %s %s", family, table, name)
	if typ, ok := b["type"].(string); ok {
		cmd += fmt.Sprintf(" { type %s hook %v priority %v ;", typ, b["hook"], jsonNumber(b["prio"]))
		if p, ok := b["policy"].(string); ok {
			cmd += " policy " + p + " ;"
		}
		cmd += " }"
	}
	return cmd
}

// jsonSet writes a set or map and its elements.
func jsonSet(kind, family, table, name string, b map[string]any) ([]string, error) {
	var typ string
	switch t := b["type"].(type) {
	case string:
		typ = t
	case []any:
		parts := make([]string, len(t))
		for i, p := range t {
			parts[i] = fmt.Sprint(p)
		}
		typ = strings.Join(parts, " . ")
	default:
		return nil, fmt.Errorf("type %v", b["type"])
	}
	if m, ok := b["map"].(string); ok {
		typ += " : " + m
	}
	spec := "type " + typ + " ;"
	if to, ok := b["timeout"].(float64); ok {
		spec += fmt.Sprintf(" timeout %ds ;", int64(to))
	}
	cmds := []string{fmt.Sprintf("add %s %s %s %s { %s }", kind, family, table, name, spec)}
	elems, _ := b["elem"].([]any)
	if len(elems) == 0 {
		return cmds, nil
	}
	words := make([]string, len(elems))
	for i, e := range elems {
		w, err := jsonElement(e, kind == "map")
		if err != nil {
			return nil, err
		}
		words[i] = w
	}
	return append(cmds, fmt.Sprintf("add element %s %s %s { %s }", family, table, name, strings.Join(words, " , "))), nil
}

// jsonElement writes a set element, or a map element [key, verdict] or
// [key, value].
func jsonElement(e any, isMap bool) (string, error) {
	if !isMap {
		return jsonValue(e)
	}
	pair, ok := e.([]any)
	if !ok || len(pair) != 2 {
		return "", fmt.Errorf("map element %v", e)
	}
	k, err := jsonValue(pair[0])
	if err != nil {
		return "", err
	}
	write := jsonStatement
	if obj, ok := pair[1].(map[string]any); !ok || obj["concat"] != nil {
		write = jsonValue
	}
	v, err := write(pair[1])
	if err != nil {
		return "", err
	}
	return k + " : " + v, nil
}

func jsonNumber(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatInt(int64(f), 10)
	}
	return fmt.Sprint(v)
}

// jsonValue writes a value: a literal, a set reference, a prefix, a range,
// a concatenation, an anonymous set, an element with options, or an
// expression.
func jsonValue(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case float64:
		return jsonNumber(v), nil
	case []any:
		parts := make([]string, len(v))
		for i, p := range v {
			w, err := jsonValue(p)
			if err != nil {
				return "", err
			}
			parts[i] = w
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		return jsonCompound(v)
	}
	return "", fmt.Errorf("unknown value %v", v)
}

// jsonCompound writes a value or expression that is an object.
func jsonCompound(v map[string]any) (string, error) {
	for k, body := range v {
		switch k {
		case "prefix":
			p, _ := body.(map[string]any)
			return fmt.Sprintf("%v/%s", p["addr"], jsonNumber(p["len"])), nil
		case "range":
			r, _ := body.([]any)
			if len(r) != 2 {
				return "", fmt.Errorf("range %v", body)
			}
			lo, errLo := jsonValue(r[0])
			hi, errHi := jsonValue(r[1])
			if errLo != nil || errHi != nil {
				return "", fmt.Errorf("range %v", body)
			}
			return lo + "-" + hi, nil
		case "concat", "set":
			return jsonList(k, body)
		case "elem":
			e, _ := body.(map[string]any)
			w, err := jsonValue(e["val"])
			if c, ok := e["comment"].(string); ok {
				w += " comment " + strconv.Quote(c)
			}
			return w, err
		}
	}
	return jsonExpr(v)
}

// jsonList writes a concatenation "a . b" or an anonymous set "{ a , b }".
func jsonList(kind string, body any) (string, error) {
	items, ok := body.([]any)
	if !ok {
		return "", fmt.Errorf("%s %v", kind, body)
	}
	parts := make([]string, len(items))
	for i, it := range items {
		var err error
		if pair, ok := it.([]any); ok && kind == "set" && len(pair) == 2 {
			parts[i], err = jsonElement(pair, true)
		} else {
			parts[i], err = jsonValue(it)
		}
		if err != nil {
			return "", err
		}
	}
	if kind == "concat" {
		return strings.Join(parts, " . "), nil
	}
	return "{ " + strings.Join(parts, " , ") + " }", nil
}

// jsonExpr writes an expression that reads the packet.
func jsonExpr(v map[string]any) (string, error) {
	for k, body := range v {
		b, _ := body.(map[string]any)
		switch k {
		case "payload":
			return fmt.Sprintf("%v %v", b["protocol"], b["field"]), nil
		case "meta", "ct":
			if dir, ok := b["dir"].(string); ok {
				return fmt.Sprintf("%s %s %v", k, dir, b["key"]), nil
			}
			return fmt.Sprintf("%s %v", k, b["key"]), nil
		case "fib":
			flags, _ := b["flags"].([]any)
			if b["result"] != "type" || len(flags) != 1 {
				return "", fmt.Errorf("unknown fib expression %v", body)
			}
			return fmt.Sprintf("fib %v type", flags[0]), nil
		case "jhash":
			return jsonJHash(b)
		case "numgen":
			s := fmt.Sprintf("numgen %v mod %s", b["mode"], jsonNumber(b["mod"]))
			if off := jsonNumber(b["offset"]); off != "0" && off != "<nil>" {
				s += " offset " + off
			}
			return s, nil
		case "&", "|", "^":
			ops, _ := body.([]any)
			if len(ops) != 2 {
				return "", fmt.Errorf("%s %v", k, body)
			}
			l, errL := jsonValue(ops[0])
			r, errR := jsonValue(ops[1])
			if errL != nil || errR != nil {
				return "", fmt.Errorf("%s %v", k, body)
			}
			return l + " " + k + " " + r, nil
		}
	}
	return "", fmt.Errorf("unknown expression %v", v)
}

// jsonStatement writes a statement or verdict of a rule (or a map's
// verdict).
func jsonStatement(e any) (string, error) {
	if text, ok := e.(string); ok {
		// nft 1.0.6 has no JSON for a dynamic map's statement
		// (`update @m { … : … }`) and writes it as its text.
		return text, nil
	}
	obj, ok := e.(map[string]any)
	if !ok || len(obj) != 1 {
		return "", fmt.Errorf("unknown statement %v", e)
	}
	for k, body := range obj {
		b, _ := body.(map[string]any)
		switch k {
		case "accept", "drop", "return", "continue":
			return k, nil
		case "jump", "goto":
			return fmt.Sprintf("%s %v", k, b["target"]), nil
		case "match":
			return jsonMatch(b)
		case "vmap":
			key, err := jsonValue(b["key"])
			if err != nil {
				return "", err
			}
			data, err := jsonValue(b["data"])
			return key + " vmap " + data, err
		case "reject":
			if b != nil && b["expr"] != "port-unreachable" {
				return "", fmt.Errorf("reject with %v", body)
			}
			return "reject", nil
		case "counter":
			return "counter", nil
		case "masquerade":
			return "masquerade", nil
		case "dnat":
			return jsonDNAT(b)
		case "mangle":
			key, errK := jsonValue(b["key"])
			val, errV := jsonValue(b["value"])
			if errK != nil || errV != nil {
				return "", fmt.Errorf("mangle %v", body)
			}
			return key + " set " + val, nil
		case "set":
			elem, err := jsonValue(b["elem"])
			return fmt.Sprintf("%v %v { %s }", b["op"], b["set"], elem), err
		}
	}
	return "", fmt.Errorf("unknown statement %v", e)
}

// jsonMatch writes "LEFT [!=] RIGHT".
func jsonMatch(b map[string]any) (string, error) {
	left, err := jsonValue(b["left"])
	if err != nil {
		return "", err
	}
	right, err := jsonValue(b["right"])
	if err != nil {
		return "", err
	}
	switch b["op"] {
	case "==", "in":
		if strings.Contains(left, " & ") {
			return left + " == " + right, nil
		}
		return left + " " + right, nil
	case "!=":
		return left + " != " + right, nil
	}
	return "", fmt.Errorf("match operator %v", b["op"])
}

// jsonDNAT writes "dnat to ADDR[:PORT]" or "dnat FAMILY to KEY map @MAP".
func jsonDNAT(b map[string]any) (string, error) {
	if m, ok := b["addr"].(map[string]any); ok {
		text, err := jsonDNATMap(b["family"], m)
		if port, ok := b["port"].(map[string]any); ok && err == nil {
			portText, err := jsonDNATMap(nil, port)
			_, portMap, _ := strings.Cut(portText, " to ")
			return text + " : " + portMap, err
		}
		return text, err
	}
	addr, err := netip.ParseAddr(fmt.Sprint(b["addr"]))
	if err != nil {
		return "", fmt.Errorf("dnat to %v", b["addr"])
	}
	if p, ok := b["port"].(float64); ok {
		return "dnat to " + netip.AddrPortFrom(addr, uint16(p)).String(), nil
	}
	return "dnat to " + addr.String(), nil
}

// jsonDNATMap writes "dnat FAMILY to KEY map @MAP" from the address of a
// dnat statement, {"map": {"key": KEY, "data": "@MAP"}}, or "dnat FAMILY
// to KEY map { … }" from an anonymous map's, {"map": {"key": KEY, "data":
// {"set": [[K, V], …]}}}.
func jsonDNATMap(family any, addr map[string]any) (string, error) {
	m, _ := addr["map"].(map[string]any)
	data, _ := m["data"].(string)
	if anon, ok := m["data"].(map[string]any); ok && m != nil && len(addr) == 1 && anon["set"] != nil {
		text, err := jsonValue(anon)
		if err != nil {
			return "", err
		}
		data = text
	} else if m == nil || len(addr) != 1 || !strings.HasPrefix(data, "@") {
		return "", fmt.Errorf("dnat to %v", addr)
	}
	key, err := jsonValue(m["key"])
	if err != nil {
		return "", err
	}
	if family == nil { // nft 1.0.6 writes none for a dnat to two maps
		return fmt.Sprintf("dnat to %s map %s", key, data), nil
	}
	return fmt.Sprintf("dnat %v to %s map %s", family, key, data), nil
}

// jsonJHash writes "jhash EXPR mod N seed S [offset O]"; nft 1.0.6 writes
// a modulus of 2³²−1 as −1.
func jsonJHash(b map[string]any) (string, error) {
	key, err := jsonValue(b["expr"])
	mod, ok := b["mod"].(float64)
	if err != nil || !ok {
		return "", fmt.Errorf("jhash %v", b)
	}
	s := fmt.Sprintf("jhash %s mod %d", key, uint32(int64(mod)))
	if seed, ok := b["seed"].(float64); ok {
		s += fmt.Sprintf(" seed %d", uint32(int64(seed)))
	}
	if off, ok := b["offset"].(float64); ok && off != 0 {
		s += fmt.Sprintf(" offset %d", uint32(int64(off)))
	}
	return s, nil
}
