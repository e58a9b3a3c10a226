package nfttrace_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// TestBrokenTextNeverPanics: the demo tables, in both syntaxes, with a few
// words of random lines deleted, repeated or replaced by nft punctuation
// and keywords, either fail to parse (with an error that names a line) or
// evaluate every demo packet to an Outcome or an error: never a panic.
func TestBrokenTextNeverPanics(t *testing.T) {
	var texts []string
	for _, name := range []string{"demo.nft", "demo-listed.nft"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(b))
	}
	vocabulary := []string{"{", "}", ",", ";", ":", ".", "!=", "@", "@cluster-ips", "jump", "goto", "vmap", "drop", "return",
		"accept", "0x1", "-", "/", "mod", "numgen", "ip", "daddr", "meta", "mark", "set", "th", "dport", "fib", "type", "\"", "elements", "=", "comment", "chain", "table"}
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
		for _, s := range demoPackets {
			p, err := tracePacket(s)
			if err != nil {
				t.Fatal(err)
			}
			tb.Evaluate(p)
		}
	})
}
