package nfttrace_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// TestBrokenTextNeverPanics: the demo tables of both layouts, in both
// syntaxes, with a few
// words of random lines deleted, repeated or replaced by nft punctuation
// and keywords, either fail to parse (with an error that names a line) or
// evaluate every demo packet to an Outcome or an error: never a panic.
func TestBrokenTextNeverPanics(t *testing.T) {
	var texts []string
	for _, name := range []string{"demo.nft", "demo-listed.nft", "flat.nft", "flat-listed.nft", "flat-affinity.nft", "flat-affinity-listed.nft"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(b))
	}
	vocabulary := []string{"{", "}", ",", ";", ":", ".", "!=", "@", "@cluster-ips", "jump", "goto", "vmap", "drop", "return",
		"accept", "0x1", "-", "/", "mod", "numgen", "ip", "daddr", "meta", "mark", "set", "th", "dport", "fib", "type", "\"", "elements", "=", "comment", "chain", "table",
		"typeof", "map", "dnat", "to", "ct", "status", "tcp", "udp", "@cluster-2-targets", "@hairpin", "interval",
		"original", "proto-dst", "update", "delete", "timeout", "@affinity-tcp", "10m"}
	rapid.Check(t, func(t *rapid.T) {
		lines := strings.Split(rapid.SampledFrom(texts).Draw(t, "text"), "\n")
		for range rapid.IntRange(1, 3).Draw(t, "edits") {
			i := rapid.IntRange(0, len(lines)-1).Draw(t, "line")
			words := strings.Fields(lines[i])
			if len(words) == 0 {
				continue
			}
			j := rapid.IntRange(0, len(words)-1).Draw(t, "word")
			switch rapid.IntRange(0, 3).Draw(t, "edit") {
			case 0:
				words = append(words[:j], words[j+1:]...)
			case 1:
				words = append(words[:j+1], words[j:]...)
			case 2:
				words[j] = rapid.SampledFrom(vocabulary).Draw(t, "replacement")
			default:
				words = words[:j]
			}
			lines[i] = strings.Join(words, " ")
		}
		tb, err := nfttrace.Parse(strings.Join(lines, "\n"))
		if err != nil {
			if !strings.Contains(err.Error(), "line ") && !strings.Contains(err.Error(), "no table") {
				t.Fatalf("error names no line: %v", err)
			}
			return
		}
		evaluateAll(t, tb)
	})
}

// evaluateAll evaluates the packets of the demos.
func evaluateAll(t *rapid.T, tb *nfttrace.Table) {
	for _, s := range slices.Concat(demoPackets, flatPackets, flatAffinityPackets) {
		p, err := tracePacket(s)
		if err != nil {
			t.Fatal(err)
		}
		tb.Evaluate(p)
	}
}

// TestBrokenJSONNeverPanics: the demo tables of both layouts as nft -j
// lists them, with random members deleted or replaced by values of other
// shapes, either fail to parse or evaluate every demo packet: never a
// panic.
func TestBrokenJSONNeverPanics(t *testing.T) {
	var docs [][]byte
	for _, name := range []string{"demo-listed.json", "flat-listed.json", "flat-affinity-listed.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	// Replacements as JSON, decoded afresh for each edit so that no two
	// edits share (and loop through) one value.
	replacements := []string{`null`, `"x"`, `"@"`, `1`, `-1`, `[]`, `["a", 2]`, `{}`, `{"jump": null}`}
	rapid.Check(t, func(t *rapid.T) {
		var doc any
		if err := json.Unmarshal(rapid.SampledFrom(docs).Draw(t, "doc"), &doc); err != nil {
			t.Fatal(err)
		}
		for range rapid.IntRange(1, 3).Draw(t, "edits") {
			var r any
			if err := json.Unmarshal([]byte(rapid.SampledFrom(replacements).Draw(t, "replacement")), &r); err != nil {
				t.Fatal(err)
			}
			breakValue(t, doc, r)
		}
		text, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		tb, err := nfttrace.Parse(string(text))
		if err != nil {
			return
		}
		evaluateAll(t, tb)
	})
}

// breakValue walks down v along random members and deletes or replaces the
// last one it reaches.
func breakValue(t *rapid.T, v any, replacement any) {
	for depth := 0; ; depth++ {
		switch c := v.(type) {
		case map[string]any:
			if len(c) == 0 {
				return
			}
			keys := make([]string, 0, len(c))
			for k := range c {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			k := rapid.SampledFrom(keys).Draw(t, "member")
			if rapid.IntRange(0, 3).Draw(t, "stop") == 0 || depth > 8 {
				if rapid.Bool().Draw(t, "delete") {
					delete(c, k)
				} else {
					c[k] = replacement
				}
				return
			}
			v = c[k]
		case []any:
			if len(c) == 0 {
				return
			}
			i := rapid.IntRange(0, len(c)-1).Draw(t, "index")
			if rapid.IntRange(0, 3).Draw(t, "stop") == 0 || depth > 8 {
				c[i] = replacement
				return
			}
			v = c[i]
		default:
			return
		}
	}
}
