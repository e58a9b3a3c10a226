package iptables

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// TestDeepCheck: what the cheap check does not read, the deep check finds:
// a Service port's chain flushed, one rule of it deleted, its chain and
// the jump to it deleted, a chain of ours added, a jump from a built-in
// chain or a fixed rule deleted, each of its kind; nothing after a full
// sync, nor after partial ones.
func TestDeepCheck(t *testing.T) {
	web := servicemap.PortName{Namespace: "ns1", Name: "web", Port: "p80", Protocol: v1.ProtocolTCP}
	tests := []struct {
		name   string
		tamper func(k *fakeKernel, n Names, rs *ruleset.Ruleset)
		want   string
		kind   svcproxy.DriftKind
	}{
		{"untouched", func(*fakeKernel, Names, *ruleset.Ruleset) {}, "", ""},
		{"service chain flushed", func(k *fakeKernel, n Names, _ *ruleset.Ruleset) {
			k.tables["nat"][n.ServiceChain(web)] = nil
		}, "chain nat KUBE-SVC-", svcproxy.DriftRule},
		{"one rule deleted", func(k *fakeKernel, n Names, _ *ruleset.Ruleset) {
			c := n.ServiceChain(web)
			k.tables["nat"][c] = k.tables["nat"][c][1:]
		}, "chain nat KUBE-SVC-", svcproxy.DriftRule},
		{"chain and its jump deleted", func(k *fakeKernel, n Names, _ *ruleset.Ruleset) {
			c := n.ServiceChain(web)
			delete(k.tables["nat"], c)
			var kept []string
			for _, r := range k.tables["nat"][n.Services()] {
				if !strings.Contains(r, c) {
					kept = append(kept, r)
				}
			}
			k.tables["nat"][n.Services()] = kept
		}, "chain nat KUBE-S", svcproxy.DriftRule},
		{"a chain of ours added", func(k *fakeKernel, n Names, _ *ruleset.Ruleset) {
			k.tables["nat"][n.ServiceChain(servicemap.PortName{Namespace: "x", Name: "y"})] = nil
		}, "should not be there", svcproxy.DriftChain},
		{"a jump from a built-in chain deleted", func(k *fakeKernel, n Names, _ *ruleset.Ruleset) {
			k.deleteJump("nat", "OUTPUT", n.Services())
		}, "the jump from nat OUTPUT to KUBE-SERVICES", svcproxy.DriftJump},
		{"a fixed rule deleted", func(k *fakeKernel, n Names, _ *ruleset.Ruleset) {
			k.tables["nat"][n.Postrouting()] = k.tables["nat"][n.Postrouting()][1:]
		}, "a rule of nat KUBE-POSTROUTING", svcproxy.DriftRule},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			k := newFakeKernel(t, v1.IPv4Protocol)
			e := newTestExecutor(t, k)
			objects := func(webEndpoints int) []any {
				return []any{
					service("ns1", "web", "198.19.0.10", nodePort(30080)),
					slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(webEndpoints, false)...),
					service("ns1", "api", "198.19.0.11"),
					slice("ns1", "api", "api-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...),
				}
			}
			first, second := build(t, testConfig(), objects(3)...), build(t, testConfig(), objects(4)...)
			if _, err := e.Apply(ctx, first); err != nil {
				t.Fatal(err)
			}
			if res, err := e.Apply(ctx, second); err != nil || res.Full {
				t.Fatalf("second Sync: %+v, %v; want a partial one", res, err)
			}
			if missing, err := e.CheckState(ctx); missing.Found() || err != nil {
				t.Fatalf("CheckState after a partial sync: %+v, %v", missing, err)
			}
			tt.tamper(k, e.names, second)
			e.deepDue = time.Time{}
			missing, err := e.CheckState(ctx)
			if err != nil || !missing.Found() != (tt.want == "") || !strings.Contains(missing.What, tt.want) || missing.Kind != tt.kind {
				t.Fatalf("CheckState: %+v, %v; want it to say %q, of kind %q", missing, err, tt.want, tt.kind)
			}
			if tt.want == "" {
				return
			}
			e.RequestFullSync()
			if _, err := e.Apply(ctx, second); err != nil {
				t.Fatal(err)
			}
			e.deepDue = time.Time{}
			if missing, err := e.CheckState(ctx); missing.Found() || err != nil {
				t.Errorf("CheckState after the repair: %+v, %v", missing, err)
			}
		})
	}
}

// TestDeepCheckSpaced: a deep check that took d is not run again within
// 19·d.
func TestDeepCheckSpaced(t *testing.T) {
	ctx := context.Background()
	k := newFakeKernel(t, v1.IPv4Protocol)
	e := newTestExecutor(t, k)
	if _, err := e.Apply(ctx, build(t, testConfig(), service("ns1", "web", "198.19.0.10"))); err != nil {
		t.Fatal(err)
	}
	k.takeCommands()
	start := time.Now()
	if _, err := e.CheckState(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	saves := func() int { return strings.Count(strings.Join(k.takeCommands(), "\n"), "iptables-save") }
	if n := saves(); n != 1 {
		t.Fatalf("%d iptables-save runs in the first check, want 1", n)
	}
	if due := e.deepDue.Sub(start); due <= 0 || due > 20*took {
		t.Errorf("next deep check %v after the start of one that took at most %v; want at most 20 times that", due, took)
	}
	if e.deepDue.After(time.Now()) {
		e.CheckState(ctx)
		if n := saves(); n != 0 {
			t.Errorf("%d iptables-save runs before the deep check was due", n)
		}
	}
}
