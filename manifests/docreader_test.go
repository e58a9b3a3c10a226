package manifests

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// TestDocReaderSplitsAsYAMLReader: docReader gives the documents, and the
// errors, that utilyaml.YAMLReader gives, on the separators' corner cases,
// CRLF line ends, a last line without its end, and lines longer than the
// reader's buffer.
func TestDocReaderSplitsAsYAMLReader(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	for _, in := range []string{
		"",
		"\n",
		"a: 1\n",
		"a: 1",
		"---\na: 1\n---\nb: 2\n",
		"---\n---\na: 1\n---\n",
		"a: 1\n--- # comment\nb: 2\n---   \nc: 3",
		"a: 1\r\nb: 2\r\n---\r\nc: 3\r\n",
		"a: 1\n--- x\nb: 2\n",
		"a: 1\n----\nb: 2\n",
		"a: 1\n ---\nb: 2\n",
		"a: " + long + "\n---\nb: " + long,
		"a: 1\r",
		"---",
	} {
		type result struct {
			Docs []string
			Err  string
		}
		read := func(next func() ([]byte, error)) result {
			var r result
			for range 100 {
				doc, err := next()
				if err != nil {
					if !errors.Is(err, io.EOF) {
						r.Err = err.Error()
					}
					return r
				}
				r.Docs = append(r.Docs, string(doc))
			}
			t.Fatalf("%q: more than 100 documents", in)
			return r
		}
		want := read(utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(in))).Read)
		got := read(newDocReader(strings.NewReader(in)).Read)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%.40q: (-YAMLReader +docReader):\n%s", in, diff)
		}
	}
}
