package svcproxy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// The layers of the module, bottom up (docs/architecture.md draws them). An
// import never goes up: a package imports packages of its own layer or
// lower ones.
const (
	layerGround   = iota // root types, affinity, low-level helpers
	layerModel           // servicemap, endpoints, topology, ruleset
	layerTrace           // trace and its evaluators
	layerBackend         // iptables, nftables, conntrack, healthcheck
	layerInput           // state, manifests, source, engine
	layerExamples        // examples/, and the whole-system tests e2e and bench
)

var layerNames = []string{"ground", "model", "trace", "backends", "inputs and engine", "examples"}

// layers assigns every package of the module, by its path below the
// module's, to a layer. A new package fails TestLayers until it is added
// here.
var layers = map[string]int{
	"":                          layerGround,
	"affinity":                  layerGround,
	"maglev":                    layerGround, // Maglev lookup tables: pure, imports nothing of ours
	"internal/cowmap":           layerGround,
	"internal/sorted":           layerGround,
	"internal/parallel":         layerGround,
	"internal/netnsrun":         layerGround,
	"internal/nfacct":           layerGround, // nfnetlink_acct counters, for the iptables executor
	"internal/prefix":           layerGround,
	"nftables/internal/model":   layerGround, // netlink encoding beneath nftables
	"nftables/internal/nftnl":   layerGround,
	"nftables/internal/nlattr":  layerGround,
	"nftables/internal/nftexec": layerGround, // what both layouts' executors share

	"servicemap": layerModel,
	"endpoints":  layerModel,
	"topology":   layerModel,
	"ruleset":    layerModel,

	"trace":          layerTrace,
	"trace/iptrace":  layerTrace,
	"trace/nfttrace": layerTrace,

	"iptables":                layerBackend,
	"nftables":                layerBackend,
	"nftables/flat":           layerBackend,
	"ebpf":                    layerBackend,
	"nftables/internal/names": layerBackend, // Service port names both layouts check
	"conntrack":               layerBackend,
	"healthcheck":             layerBackend,

	"state":     layerInput,
	"manifests": layerInput,
	"source":    layerInput,
	"engine":    layerInput,

	"examples":                 layerExamples,
	"examples/demo":            layerExamples,
	"examples/internal/proxy":  layerExamples,
	"examples/iptables-proxy":  layerExamples,
	"examples/nftables-proxy":  layerExamples,
	"examples/ebpf-proxy":      layerExamples,
	"examples/userspace-proxy": layerExamples,
	"e2e":                      layerExamples,
	"e2e/differential":         layerExamples,
	"bench":                    layerExamples,

	// Test kits (imported by tests and bench only, never by a library
	// package's own code), each at the layer of the highest package it
	// imports, so that the tests of that layer may use it.
	"internal/testkit":            layerGround,
	"internal/testkit/netns":      layerGround,
	"internal/testkit/cgroup":     layerGround,
	"internal/testkit/proxybin":   layerGround,
	"internal/testkit/apiserver":  layerGround,
	"internal/testkit/warnings":   layerGround,
	"internal/testkit/scalegen":   layerModel,
	"internal/testkit/fixture":    layerModel,
	"internal/testkit/scaleworld": layerModel,
	"internal/testkit/rapidgen":   layerModel,
	"internal/testkit/nfttest":    layerModel,
}

const module = "github.com/svcproxy/svcproxy"

// listed is what go list tells of one package.
type listed struct {
	ImportPath   string
	Imports      []string // of its non-test files
	TestImports  []string // of its in-package test files
	XTestImports []string // of its external test package (package x_test)
	Deps         []string // everything its non-test files need, transitively
}

// TestLayers checks every import of every package of the module, test
// files' too, against the layers: a package, and its in-package tests, may
// import its own layer and those below it. An external test package
// (package x_test) may import what the examples layer may, except a
// library package built on the package it tests: a test that goes through
// a higher layer belongs with that layer's tests. Only the examples layer,
// test kits and test files import the test kits.
func TestLayers(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH: cannot list the module's packages")
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports,Deps", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < len(layers)/2 {
		t.Fatalf("go list found %d packages; is the test running at the module root?", len(pkgs))
	}
	deps := map[string][]string{}
	for _, p := range pkgs {
		deps[p.ImportPath] = p.Deps
	}
	for _, p := range pkgs {
		for _, v := range layerViolations(p, deps) {
			t.Error(v)
		}
	}
}

// rel is a module package's path below the module ("" for the root), and
// whether path is one of the module's packages.
func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

// show names a module package as the layer table does.
func show(r string) string {
	if r == "" {
		return "svcproxy (the module root)"
	}
	return r
}

func isTestkit(r string) bool {
	return r == "internal/testkit" || strings.HasPrefix(r, "internal/testkit/")
}

// layerViolations lists what is wrong with p's imports.
func layerViolations(p listed, deps map[string][]string) []string {
	self, _ := rel(p.ImportPath)
	layer, ok := layers[self]
	if !ok {
		return []string{fmt.Sprintf("package %s is in no layer: add it to the layers table in layers_test.go (and to docs/architecture.md)", show(self))}
	}
	var out []string
	check := func(what string, imports []string, may int, test bool) {
		for _, imp := range imports {
			r, ours := rel(imp)
			if !ours || r == self {
				continue
			}
			l, ok := layers[r]
			if !ok {
				continue // reported as a package of its own
			}
			verb := "imports"
			if test {
				verb = "import"
			}
			if l > may {
				out = append(out, fmt.Sprintf("%s (layer %d, %s) %s %s (layer %d, %s), a higher layer: an import never goes up (layers_test.go, docs/architecture.md)",
					what, layer, layerNames[layer], verb, show(r), l, layerNames[l]))
			}
			if isTestkit(r) && !test && !isTestkit(self) && layer != layerExamples {
				out = append(out, fmt.Sprintf("%s %s the test kit %s: only tests, other test kits and the examples layer may", what, verb, show(r)))
			}
		}
	}
	check(show(self), p.Imports, layer, false)
	check(show(self)+"'s in-package tests", p.TestImports, layer, true)
	check(show(self)+"'s external tests", p.XTestImports, layerExamples, true)
	if self == "" {
		return out // everything is built on the root: its examples may use it all
	}
	for _, imp := range p.XTestImports {
		r, ours := rel(imp)
		if !ours || r == self || isTestkit(r) {
			continue
		}
		if dependsOn(deps, r, p.ImportPath) {
			out = append(out, fmt.Sprintf("%s's external tests import %s, which is built on %s: a test through a higher layer belongs with that layer's tests",
				show(self), show(r), show(self)))
		}
	}
	return out
}

// dependsOn reports whether the module package r imports path, directly or
// not (its non-test files), by deps: each package's Deps.
func dependsOn(deps map[string][]string, r, path string) bool {
	full := module
	if r != "" {
		full += "/" + r
	}
	for _, d := range deps[full] {
		if d == path {
			return true
		}
	}
	return false
}
