package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
)

// fakeKernel is a Runner that keeps the tables in a model, plus the rules of
// the built-in chains, and answers iptables and iptables-restore as the real
// tools do for the commands the Executor runs.
type fakeKernel struct {
	t        *testing.T
	family   v1.IPFamily
	tables   model
	builtin  map[string][]string // "table/CHAIN" → rule specs
	commands []string
	// failRestore makes the next n restores that write (not the state
	// checks) fail with exit status 1.
	failRestore int
}

func newFakeKernel(t *testing.T, family v1.IPFamily) *fakeKernel {
	return &fakeKernel{t: t, family: family, tables: newModel(), builtin: map[string][]string{}}
}

func (k *fakeKernel) names() (restore, ipt string) {
	if k.family == v1.IPv6Protocol {
		return "ip6tables-restore", "ip6tables"
	}
	return "iptables-restore", "iptables"
}

func (k *fakeKernel) fail(cmd Command, code int, msg string) error {
	return &CommandError{Command: cmd.String(), ExitCode: code, Stderr: msg, Err: fmt.Errorf("exit status %d", code)}
}

func (k *fakeKernel) Run(_ context.Context, cmd Command) error {
	k.commands = append(k.commands, cmd.String())
	restore, ipt := k.names()
	out := cmd.Stdout
	if out == nil {
		out = io.Discard
	}
	switch cmd.Name {
	case restore:
		if !slices.Equal(cmd.Args, []string{"--noflush", "--counters", "-w"}) {
			return k.fail(cmd, 2, "unexpected flags")
		}
		if bytes.Contains(cmd.Stdin, []byte("\n-C ")) {
			return k.check(cmd)
		}
		if k.failRestore > 0 {
			k.failRestore--
			return k.fail(cmd, 1, "injected failure")
		}
		// "-S" lists the table as it is before the restore.
		table := ""
		for _, line := range strings.Split(string(cmd.Stdin), "\n") {
			if t, ok := strings.CutPrefix(line, "*"); ok {
				table = t
			}
			if line == "-S" {
				k.list(table, out)
			}
		}
		next, err := applyRestore(k.tables, cmd.Stdin)
		if err != nil {
			return k.fail(cmd, 1, err.Error())
		}
		// A chain still jumped to from a built-in chain cannot go.
		for key, rules := range k.builtin {
			table := strings.Split(key, "/")[0]
			for _, r := range rules {
				target := r[strings.LastIndex(r, " ")+1:]
				if _, ok := next[table][target]; !ok {
					return k.fail(cmd, 1, "chain "+target+" is referenced from "+key)
				}
			}
		}
		k.tables = next
		return nil
	case ipt:
		if len(cmd.Args) < 4 || cmd.Args[0] != "-w" || cmd.Args[1] != "-t" {
			return k.fail(cmd, 2, "unexpected arguments")
		}
		table, op := cmd.Args[2], cmd.Args[3]
		if op == "-S" {
			k.list(table, out)
			return nil
		}
		if op == "-X" {
			chain, ok := k.tables[table][cmd.Args[4]]
			if !ok || len(chain) > 0 {
				return k.fail(cmd, 1, "cannot delete chain '"+cmd.Args[4]+"': missing or not empty")
			}
			delete(k.tables[table], cmd.Args[4])
			if len(k.tables[table]) == 0 {
				delete(k.tables, table) // the model holds tables with chains
			}
			return nil
		}
		key := table + "/" + cmd.Args[4]
		spec := strings.Join(cmd.Args[5:], " ")
		target := cmd.Args[len(cmd.Args)-1]
		if _, ok := k.tables[table][target]; !ok {
			return k.fail(cmd, 2, "Chain '"+target+"' does not exist")
		}
		i := slices.Index(k.builtin[key], spec)
		switch op {
		case "-C":
			if i < 0 {
				return k.fail(cmd, 1, "Bad rule (does a matching rule exist in that chain?).")
			}
		case "-I":
			k.builtin[key] = slices.Insert(k.builtin[key], 0, spec)
		case "-D":
			if i < 0 {
				return k.fail(cmd, 1, "Bad rule (does a matching rule exist in that chain?).")
			}
			k.builtin[key] = slices.Delete(k.builtin[key], i, i+1)
		default:
			return k.fail(cmd, 2, "unexpected operation")
		}
		return nil
	}
	if cmd.Name == strings.TrimSuffix(restore, "-restore")+"-save" && len(cmd.Args) == 0 {
		// Every table the kernel holds, as iptables-save writes them.
		for _, table := range slices.Sorted(maps.Keys(k.tables)) {
			fmt.Fprintf(out, "*%s\n", table)
			k.save(table, out)
			fmt.Fprintln(out, "COMMIT")
		}
		return nil
	}
	return k.fail(cmd, -1, "unknown command")
}

// save writes the chains and rules of table as iptables-save does: the
// chains, then the rules, the built-in chains' first.
func (k *fakeKernel) save(table string, w io.Writer) {
	for _, c := range k.tables.chainsOf(table) {
		fmt.Fprintf(w, ":%s - [0:0]\n", c)
	}
	for _, key := range slices.Sorted(maps.Keys(k.builtin)) {
		if t, chain, _ := strings.Cut(key, "/"); t == table {
			for _, r := range k.builtin[key] {
				fmt.Fprintf(w, "-A %s %s\n", chain, r)
			}
		}
	}
	for _, c := range k.tables.chainsOf(table) {
		for _, r := range k.tables[table][c] {
			fmt.Fprintf(w, "-A %s %s\n", c, r)
		}
	}
}

// builtinChains are the built-in chains the Executor's jumps start from.
var builtinChains = map[string]bool{"INPUT": true, "FORWARD": true, "OUTPUT": true, "PREROUTING": true, "POSTROUTING": true}

// check answers a restore of "-C" lines as iptables-restore does: it
// changes nothing and fails on the first rule that is not there, naming its
// line.
func (k *fakeKernel) check(cmd Command) error {
	restore, _ := k.names()
	table := ""
	for n, line := range strings.Split(string(cmd.Stdin), "\n") {
		if t, ok := strings.CutPrefix(line, "*"); ok {
			table = t
		}
		if !strings.HasPrefix(line, "-C ") {
			continue
		}
		args, err := tokenize(line)
		if err != nil || len(args) < 3 {
			return k.fail(cmd, 2, fmt.Sprintf("%s: line %d: bad check %q", restore, n+1, line))
		}
		if !k.has(table, args[1], strings.Join(args[2:], " ")) {
			return k.fail(cmd, 1, fmt.Sprintf("%s: line %d failed: Bad rule (does a matching rule exist in that chain?).", restore, n+1))
		}
	}
	return nil
}

// has reports whether chain of table holds the rule spec (arguments joined
// by single spaces, unquoted).
func (k *fakeKernel) has(table, chain, spec string) bool {
	if builtinChains[chain] {
		return slices.Contains(k.builtin[table+"/"+chain], spec)
	}
	for _, rule := range k.tables[table][chain] {
		if args, err := tokenize(rule); err == nil && strings.Join(args, " ") == spec {
			return true
		}
	}
	return false
}

// flush empties every chain of table, built-in ones included, as
// `iptables -t TABLE -F` does.
func (k *fakeKernel) flush(table string) {
	for c := range k.tables[table] {
		k.tables[table][c] = []string{}
	}
	for key := range k.builtin {
		if strings.HasPrefix(key, table+"/") {
			delete(k.builtin, key)
		}
	}
}

// deleteJump removes the rules of table's built-in chain from that jump to
// target.
func (k *fakeKernel) deleteJump(table, from, target string) {
	key := table + "/" + from
	k.builtin[key] = slices.DeleteFunc(k.builtin[key], func(r string) bool { return strings.HasSuffix(r, " -j "+target) })
}

func (k *fakeKernel) list(table string, w io.Writer) {
	for _, c := range k.tables.chainsOf(table) {
		fmt.Fprintf(w, "-N %s\n", c)
	}
	for _, c := range k.tables.chainsOf(table) {
		for _, r := range k.tables[table][c] {
			fmt.Fprintf(w, "-A %s %s\n", c, r)
		}
	}
}

// jumpCount is how many rules of the built-in chains jump to chains names
// owns.
func (k *fakeKernel) jumpCount(names Names) int {
	n := 0
	for _, rules := range k.builtin {
		for _, r := range rules {
			if names.Owns(r[strings.LastIndex(r, " ")+1:]) {
				n++
			}
		}
	}
	return n
}

func (k *fakeKernel) takeCommands() []string {
	c := k.commands
	k.commands = nil
	return c
}

func newTestExecutor(t *testing.T, k *fakeKernel) *Executor {
	return newNamedTestExecutor(t, k, Names{})
}

func newNamedTestExecutor(t *testing.T, k *fakeKernel, names Names) *Executor {
	e, err := NewExecutor(ExecutorConfig{Family: k.family, Names: names, Runner: k})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// wantState checks that the fake's tables are exactly what a full render of
// rs gives on empty tables, with the Canary chains, plus the foreign chains
// in extra.
func wantState(t *testing.T, k *fakeKernel, rs *ruleset.Ruleset, extra model) {
	t.Helper()
	wantNamedState(t, k, Names{}, rs, extra)
}

func wantNamedState(t *testing.T, k *fakeKernel, names Names, rs *ruleset.Ruleset, extra model) {
	t.Helper()
	want, err := applyRestore(extra, renderFull(names, rs, renderOptions{canary: true}))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, k.tables); d != "" {
		t.Errorf("kernel state (-want +got):\n%s", d)
	}
}

func TestExecutorFullThenPartial(t *testing.T) {
	ctx := context.Background()
	k := newFakeKernel(t, v1.IPv4Protocol)
	e := newTestExecutor(t, k)

	one := build(t, testConfig(),
		service("ns1", "web", "198.19.0.10", nodePort(30080)),
		slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(3, false)...))
	res, err := e.Apply(ctx, one)
	if err != nil || !res.Full {
		t.Fatalf("first Sync: %+v, %v; want a full sync", res, err)
	}
	cmds := k.takeCommands()
	if cmds[0] != "iptables-restore --noflush --counters -w" {
		t.Errorf("first command %q", cmds[0])
	}
	if len(cmds) != 1+2*len(jumps) {
		t.Errorf("full sync ran %d commands, want the restore, %d -C and %d -I:\n%s", len(cmds), len(jumps), len(jumps), strings.Join(cmds, "\n"))
	}
	if got := k.jumpCount(DefaultNames()); got != len(jumps) {
		t.Errorf("%d jumps installed, want %d", got, len(jumps))
	}
	wantState(t, k, one, nil)

	// Nothing changed: nothing runs.
	res, err = e.Apply(ctx, one)
	if err != nil || !res.Skipped || len(k.takeCommands()) != 0 {
		t.Fatalf("unchanged Sync: %+v, %v; want it skipped", res, err)
	}

	// One endpoint gone, one Service added: a partial sync, one restore.
	two := build(t, testConfig(),
		service("ns1", "web", "198.19.0.10", nodePort(30080)),
		slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...),
		service("ns2", "api", "198.19.0.11"),
		slice("ns2", "api", "api-1", 8080, v1.ProtocolTCP, readyEPs(1, false)...))
	res, err = e.Apply(ctx, two)
	if err != nil || res.Full || len(res.Changes.Added) != 1 || len(res.Changes.Changed) != 1 {
		t.Fatalf("second Sync: %+v, %v; want a partial sync", res, err)
	}
	if cmds := k.takeCommands(); len(cmds) != 2 {
		t.Errorf("partial sync ran %v, want the state check and one restore", cmds)
	}
	wantState(t, k, two, nil)

	// A requested full sync re-checks the jumps but adds none.
	e.RequestFullSync()
	if res, err := e.Apply(ctx, two); err != nil || !res.Full {
		t.Fatalf("requested full Sync: %+v, %v", res, err)
	}
	if got := k.jumpCount(DefaultNames()); got != len(jumps) {
		t.Errorf("%d jumps after a second full sync, want %d", got, len(jumps))
	}
	wantState(t, k, two, nil)

	// Removing everything deletes every per-Service chain at once.
	empty := build(t, testConfig())
	if _, err := e.Apply(ctx, empty); err != nil {
		t.Fatal(err)
	}
	wantState(t, k, empty, nil)
}

func TestExecutorFailureFallsBackToFullSync(t *testing.T) {
	ctx := context.Background()
	k := newFakeKernel(t, v1.IPv4Protocol)
	e := newTestExecutor(t, k)
	a := build(t, testConfig(), service("ns1", "web", "198.19.0.10"), slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...))
	b := build(t, testConfig(), service("ns1", "web", "198.19.0.10"), slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(1, false)...))
	if _, err := e.Apply(ctx, a); err != nil {
		t.Fatal(err)
	}
	// The partial restore and the full one after it fail.
	k.failRestore = 2
	res, err := e.Apply(ctx, b)
	var ce *CommandError
	if !errors.As(err, &ce) || ce.ExitCode != 1 || res.Fallback != FallbackPartialFailed {
		t.Fatalf("Sync with failing restores: %+v, %v; want a CommandError after a fallback", res, err)
	}
	wantState(t, k, a, nil) // a failed restore changes nothing
	res, err = e.Apply(ctx, b)
	if err != nil || !res.Full || res.Fallback != FallbackNone {
		t.Fatalf("Sync after a failure: %+v, %v; want a full sync, not a fallback", res, err)
	}
	wantState(t, k, b, nil)

	// Only the partial restore fails: the full sync runs in the same Sync.
	k.failRestore = 1
	res, err = e.Apply(ctx, a)
	if err != nil || !res.Full || res.Fallback != FallbackPartialFailed || !strings.Contains(res.FallbackDetail, "injected failure") {
		t.Fatalf("Sync with a failing partial restore: %+v, %v; want a full sync after it", res, err)
	}
	wantState(t, k, a, nil)

	// With ctx done, a failed partial restore is not followed by a full
	// sync; the next Sync is full.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	k.failRestore = 1
	res, err = e.Apply(cancelled, b)
	if err == nil || res.Full || res.Fallback != FallbackNone {
		t.Fatalf("Sync with ctx done and a failing restore: %+v, %v; want the partial failure alone", res, err)
	}
	wantState(t, k, a, nil)
	if res, err := e.Apply(ctx, b); err != nil || !res.Full || res.Fallback != FallbackNone {
		t.Fatalf("Sync after it: %+v, %v; want a full sync", res, err)
	}
	wantState(t, k, b, nil)

	// A Config change forces a full sync too.
	cfg := testConfig()
	cfg.MasqueradeAll = true
	c := build(t, cfg, service("ns1", "web", "198.19.0.10"), slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(1, false)...))
	if res, err := e.Apply(ctx, c); err != nil || !res.Full {
		t.Fatalf("Sync after a Config change: %+v, %v; want a full sync", res, err)
	}
	wantState(t, k, c, nil)

	// The wrong family is refused.
	six := build(t, ruleset.Config{Family: v1.IPv6Protocol})
	if _, err := e.Apply(ctx, six); err == nil {
		t.Error("IPv6 Ruleset accepted by the IPv4 executor")
	}
}

// foreign is state that is not ours: it must survive syncs and Cleanup.
func foreign() model {
	return model{
		"nat": {
			"DOCKER":                     {"-d 198.18.9.9 -j RETURN"},
			"KUBE-SVC-short":             {},
			"CNI-SVC-AAAAAAAAAAAAAAAA":   {},
			"KUBE-KUBELET-CANARY":        {},
			"KUBE-SEP-AAAAAAAAAAAAAAAA1": {},
		},
		"filter": {"DOCKER-USER": {"-j RETURN"}},
	}
}

func TestExecutorRemovesLeftoversOnly(t *testing.T) {
	ctx := context.Background()
	k := newFakeKernel(t, v1.IPv4Protocol)
	k.tables = foreign()
	// Left by an earlier process: a Service chain jumping to an endpoint
	// chain, and a nat chain for multiple cluster CIDRs.
	k.tables["nat"]["KUBE-SVC-AAAAAAAAAAAAAAAA"] = []string{"-j KUBE-SEP-BBBBBBBBBBBBBBBB"}
	k.tables["nat"]["KUBE-SEP-BBBBBBBBBBBBBBBB"] = []string{"-j DNAT --to-destination 198.18.64.9:80"}
	k.tables["nat"]["KUBE-MASQ-NONPOD"] = []string{}
	e := newTestExecutor(t, k)
	rs := build(t, testConfig(), service("ns1", "web", "198.19.0.10"), slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(1, false)...))
	res, err := e.Apply(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"KUBE-MASQ-NONPOD", "KUBE-SEP-BBBBBBBBBBBBBBBB", "KUBE-SVC-AAAAAAAAAAAAAAAA"}; !slices.Equal(res.Leftovers, want) {
		t.Errorf("Leftovers %v, want %v", res.Leftovers, want)
	}
	wantState(t, k, rs, foreign())
}

func TestExecutorCleanup(t *testing.T) {
	ctx := context.Background()
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		// Chunks of 1 and 3 cut the loadbalancer scenario's chains
		// (which jump to one another) across restores.
		for _, chunk := range []int{deleteChunk, 3, 1} {
			t.Run(fmt.Sprintf("%s/chunk=%d", family, chunk), func(t *testing.T) {
				testCleanup(ctx, t, family, chunk)
			})
		}
	}
}

// testCleanup syncs a scenario over foreign state, then checks that Cleanup,
// deleting chunk chains per restore, leaves exactly the foreign state.
func testCleanup(ctx context.Context, t *testing.T, family v1.IPFamily, chunk int) {
	k := newFakeKernel(t, family)
	k.tables = foreign()
	k.builtin["nat/PREROUTING"] = []string{"-m comment --comment docker -j DOCKER"}
	e := newTestExecutor(t, k)
	e.deleteChunk = chunk
	sc := scenarioNamed(t, "loadbalancer-source-ranges")
	if family == v1.IPv6Protocol {
		sc = scenarioNamed(t, "ipv6")
	}
	if _, err := e.Apply(ctx, sc.ruleset(t)); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"filter", "nat", "mangle"} {
		if rules, ok := k.tables[table][e.names.Canary()]; !ok || len(rules) > 0 {
			t.Errorf("after a full sync, %s %s: %q (present %v); want it empty, as kube-proxy's", table, e.names.Canary(), rules, ok)
		}
	}
	if err := e.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(foreign(), k.tables); d != "" {
		t.Errorf("after Cleanup (-want +got):\n%s", d)
	}
	if n := k.jumpCount(DefaultNames()); n != 0 {
		t.Errorf("%d jumps left", n)
	}
	if got := k.builtin["nat/PREROUTING"]; !slices.Equal(got, []string{"-m comment --comment docker -j DOCKER"}) {
		t.Errorf("foreign jump changed: %v", got)
	}
	// Cleanup twice is fine, and the next Sync is full.
	if err := e.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := e.Apply(ctx, sc.ruleset(t)); err != nil || !res.Full {
		t.Fatalf("Sync after Cleanup: %+v, %v", res, err)
	}
}

func TestRenderDelete(t *testing.T) {
	for _, tc := range []struct {
		name        string
		filter, nat []string
		chunk       int
		want        []string
	}{
		{name: "nothing", chunk: 2},
		{
			name: "one chunk per table", filter: []string{"F1"}, nat: []string{"N1", "N2"}, chunk: 2,
			want: []string{
				"*filter\n:F1 - [0:0]\nCOMMIT\n",
				"*nat\n:N1 - [0:0]\n:N2 - [0:0]\nCOMMIT\n",
				"*filter\n-X F1\nCOMMIT\n",
				"*nat\n-X N1\n-X N2\nCOMMIT\n",
			},
		},
		{
			name: "every chain flushed before any is deleted", nat: []string{"N1", "N2", "N3"}, chunk: 2,
			want: []string{
				"*nat\n:N1 - [0:0]\n:N2 - [0:0]\nCOMMIT\n",
				"*nat\n:N3 - [0:0]\nCOMMIT\n",
				"*nat\n-X N1\n-X N2\nCOMMIT\n",
				"*nat\n-X N3\nCOMMIT\n",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, in := range renderDelete(tc.filter, tc.nat, tc.chunk) {
				got = append(got, string(in))
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("renderDelete (-want +got):\n%s", d)
			}
		})
	}
}

func TestChainLister(t *testing.T) {
	l := &chainLister{names: DefaultNames()}
	text := "-P INPUT ACCEPT\n-N KUBE-SERVICES\n-N DOCKER\n-N KUBE-SVC-AAAAAAAAAAAAAAAA\n-A KUBE-SERVICES -j RETURN\n-N KUBE-SEP-BBBBBBBBBBBBBBBB"
	for i := 0; i < len(text); i += 3 { // arbitrary write boundaries
		l.Write([]byte(text[i:min(i+3, len(text))]))
	}
	want := []string{"KUBE-SEP-BBBBBBBBBBBBBBBB", "KUBE-SERVICES", "KUBE-SVC-AAAAAAAAAAAAAAAA"}
	if got := l.chains(); !slices.Equal(got, want) {
		t.Errorf("chains %v, want %v", got, want)
	}
}
