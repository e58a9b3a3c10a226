package svcproxy_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log"
	"os"
	"regexp"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

// Embedding svcproxy: objects in (here from the demo's manifests; from an
// API server, package source feeds the State), a Ruleset out, rendered as
// iptables-restore input. README.md opens with this function's body
// (TestREADMESnippet keeps the two the same).
func Example() {
	objs, warnings, err := manifests.Load("examples/demo/manifests") // or package source: an API server
	if err != nil {
		log.Fatal(err)
	}
	st, _ := state.New([]v1.IPFamily{v1.IPv4Protocol}, "node-a", servicemap.Filter{})
	warnings = append(warnings, st.Replace(*objs)...)
	snap := st.Snapshot()
	fam, _ := snap.Family(v1.IPv4Protocol)
	builder, _ := ruleset.NewBuilder(ruleset.Config{Family: fam.IPFamily, Node: snap.Node, NodePortAddresses: fam.NodeAddresses})
	rs, buildWarnings := builder.Build(fam.Services, fam.Endpoints)
	rules := iptables.Render(iptables.DefaultNames(), rs) // iptables-restore input, for iptables.Executor
	fmt.Println(rs.Len(), "Service ports,", len(warnings)+len(buildWarnings), "warnings,", bytes.Count(rules, []byte("\n-A ")), "rules")
	// Output: 6 Service ports, 0 warnings, 58 rules
}

// TestREADMESnippet checks that the Go snippet README.md opens with is
// Example's body, so that the snippet compiles and does what Example's
// output says.
func TestREADMESnippet(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no ```go block")
	}
	snippet := string(m[1])

	const file = "readme_example_test.go"
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Example" {
			// From after the brace to the line of "// Output:".
			text := string(src[fset.Position(fn.Body.Lbrace).Offset+2 : fset.Position(fn.Body.Rbrace).Offset])
			text, _, _ = strings.Cut(text, "\t// Output:")
			for line := range strings.Lines(text) {
				body += strings.TrimPrefix(line, "\t")
			}
		}
	}
	if body == "" {
		t.Fatalf("%s has no Example function", file)
	}
	if snippet != body {
		t.Errorf("README.md's first Go snippet is not Example's body in %s:\n--- README.md\n%s--- Example\n%s", file, snippet, body)
	}
}
