//go:build linux

package flat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"sigs.k8s.io/knftables"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if os.Geteuid() == 0 {
		if swept, err := netns.Sweep(); err != nil || len(swept) > 0 {
			fmt.Fprintf(os.Stderr, "nftables/flat: leftover namespaces %v (swept; %v)\n", swept, err)
			code = 1
		}
	}
	os.Exit(code)
}

// kernelState lists a table inside ns in a canonical form: handles dropped,
// the table renamed, set and map elements sorted, rules kept in order.
func kernelState(t testing.TB, ns *netns.NS, nft string, family knftables.Family, table string) string {
	t.Helper()
	out, err := ns.Run(context.Background(), nft, "-j", "list", "table", string(family), table)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Nftables []map[string]map[string]any `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	var objects []string
	rules := map[string][]string{}
	for _, o := range doc.Nftables {
		for kind, body := range o {
			if kind == "metainfo" || kind == "table" {
				continue
			}
			delete(body, "handle")
			body["table"] = "T"
			if elems, ok := body["elem"].([]any); ok {
				slices.SortFunc(elems, func(a, b any) int { return strings.Compare(mustJSON(a), mustJSON(b)) })
			}
			if kind == "rule" {
				chain := body["chain"].(string)
				rules[chain] = append(rules[chain], mustJSON(body))
			} else {
				objects = append(objects, kind+" "+mustJSON(body))
			}
		}
	}
	slices.Sort(objects)
	chains := make([]string, 0, len(rules))
	for c := range rules {
		chains = append(chains, c)
	}
	slices.Sort(chains)
	for _, c := range chains {
		objects = append(objects, rules[c]...)
	}
	return strings.Join(objects, "\n")
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
