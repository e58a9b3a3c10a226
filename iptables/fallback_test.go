package iptables

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// TestExecutorPartialChecksState: after a full sync, something changes the
// tables behind the Executor's back, then one Service changes. The Sync
// that follows must not build on the damaged state: it falls back to a full
// sync, says why, and leaves exactly the state of a full sync, jumps
// included. The check follows the Executor's Names.
func TestExecutorPartialChecksState(t *testing.T) {
	cni, err := NewNames("CNI")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		tamper func(k *fakeKernel, n Names, before *ruleset.Ruleset)
		// want is the fallback, wantDetail a part of its detail;
		// wantCheck a part of what CheckState finds missing, of kind
		// wantKind.
		want                  FallbackReason
		wantDetail, wantCheck string
		wantKind              svcproxy.DriftKind
	}{
		{
			name:   "untouched",
			tamper: func(*fakeKernel, Names, *ruleset.Ruleset) {},
			want:   FallbackNone,
		},
		{
			name:       "nat flushed",
			tamper:     func(k *fakeKernel, _ Names, _ *ruleset.Ruleset) { k.flush("nat") },
			want:       FallbackStateMissing,
			wantDetail: "missing: the jump from nat OUTPUT to %s-SERVICES",
			wantCheck:  "the jump from nat OUTPUT to %s-SERVICES",
			wantKind:   svcproxy.DriftJump,
		},
		{
			name:       "filter flushed",
			tamper:     func(k *fakeKernel, _ Names, _ *ruleset.Ruleset) { k.flush("filter") },
			want:       FallbackStateMissing,
			wantDetail: "missing: the jump from filter INPUT to %s-EXTERNAL-SERVICES",
			wantCheck:  "the jump from filter INPUT to %s-EXTERNAL-SERVICES",
			wantKind:   svcproxy.DriftJump,
		},
		{
			name: "jump from nat PREROUTING deleted",
			tamper: func(k *fakeKernel, n Names, _ *ruleset.Ruleset) {
				k.deleteJump("nat", "PREROUTING", n.Services())
			},
			want:       FallbackStateMissing,
			wantDetail: "missing: the jump from nat PREROUTING to %s-SERVICES",
			wantCheck:  "the jump from nat PREROUTING to %s-SERVICES",
			wantKind:   svcproxy.DriftJump,
		},
		{
			name: "jump from filter FORWARD to the forward chain deleted",
			tamper: func(k *fakeKernel, n Names, _ *ruleset.Ruleset) {
				k.deleteJump("filter", "FORWARD", n.Forward())
			},
			want:       FallbackStateMissing,
			wantDetail: "missing: the jump from filter FORWARD to %s-FORWARD",
			wantCheck:  "the jump from filter FORWARD to %s-FORWARD",
			wantKind:   svcproxy.DriftJump,
		},
		{
			name: "postrouting chain and its jump deleted",
			tamper: func(k *fakeKernel, n Names, _ *ruleset.Ruleset) {
				k.deleteJump("nat", "POSTROUTING", n.Postrouting())
				delete(k.tables["nat"], n.Postrouting())
			},
			want:       FallbackStateMissing,
			wantDetail: "missing: the jump from nat POSTROUTING to %s-POSTROUTING",
			wantCheck:  "the jump from nat POSTROUTING to %s-POSTROUTING",
			wantKind:   svcproxy.DriftJump,
		},
		{
			name: "an unchanged Service's chains deleted",
			tamper: func(k *fakeKernel, n Names, before *ruleset.Ruleset) {
				api, _ := before.Service(servicemap.PortName{Namespace: "ns1", Name: "api", Port: "p80", Protocol: v1.ProtocolTCP})
				p := newRenderer(n, before.Config()).plan(api)
				k.tables["nat"][n.Services()] = nil
				for _, c := range p.chains() {
					delete(k.tables["nat"], c)
				}
			},
			want:       FallbackPartialFailed,
			wantDetail: "jump to missing chain %s-SVC-",
			wantCheck:  "a rule of nat %s-SERVICES",
			wantKind:   svcproxy.DriftRule,
		},
	}
	for _, names := range []Names{DefaultNames(), cni} {
		for _, tt := range tests {
			t.Run(names.Prefix()+"/"+tt.name, func(t *testing.T) {
				prefixed := func(s string) string { return strings.ReplaceAll(s, "%s", names.Prefix()) }
				testPartialChecksState(t, names, tt.tamper, tt.want, prefixed(tt.wantDetail), prefixed(tt.wantCheck), tt.wantKind)
			})
		}
	}
}

func testPartialChecksState(t *testing.T, names Names, tamper func(*fakeKernel, Names, *ruleset.Ruleset), want FallbackReason, wantDetail, wantCheck string, wantKind svcproxy.DriftKind) {
	ctx := context.Background()
	k := newFakeKernel(t, v1.IPv4Protocol)
	e := newNamedTestExecutor(t, k, names)
	objects := func(webEndpoints int) []any {
		return []any{
			service("ns1", "web", "198.19.0.10", nodePort(30080)),
			slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(webEndpoints, false)...),
			service("ns1", "api", "198.19.0.11"),
			slice("ns1", "api", "api-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...),
		}
	}
	before, after := build(t, testConfig(), objects(3)...), build(t, testConfig(), objects(2)...)
	if res, err := e.Apply(ctx, before); err != nil || !res.Full {
		t.Fatalf("first Sync: %+v, %v; want a full sync", res, err)
	}
	if missing, err := e.CheckState(ctx); missing.Found() || err != nil {
		t.Fatalf("CheckState after a full sync: %+v, %v", missing, err)
	}
	tamper(k, names, before)
	k.takeCommands()
	if missing, err := e.CheckState(ctx); err != nil || !missing.Found() != (wantCheck == "") || !strings.Contains(missing.What, wantCheck) || missing.Kind != wantKind {
		t.Errorf("CheckState: %+v, %v; want it to name %q, of kind %q", missing, err, wantCheck, wantKind)
	}
	k.takeCommands()

	res, err := e.Apply(ctx, after)
	if err != nil {
		t.Fatalf("Sync after the change: %v", err)
	}
	if res.Fallback != want || !strings.Contains(res.FallbackDetail, wantDetail) {
		t.Errorf("Fallback %q, detail %q; want %q with %q", res.Fallback, res.FallbackDetail, want, wantDetail)
	}
	if wantFull := want != FallbackNone; res.Full != wantFull {
		t.Errorf("Full = %v, want %v", res.Full, wantFull)
	}
	if cmds := k.takeCommands(); len(cmds) == 0 || !strings.HasPrefix(cmds[0], "iptables-restore") {
		t.Errorf("first command %v, want the state check", cmds)
	}
	wantNamedState(t, k, names, after, nil)
	if got := k.jumpCount(names); got != len(jumps) {
		t.Errorf("%d jumps, want %d", got, len(jumps))
	}
	// And the next change is partial again.
	if res, err := e.Apply(ctx, before); err != nil || res.Full {
		t.Errorf("next Sync: %+v, %v; want a partial sync", res, err)
	}
	wantNamedState(t, k, names, before, nil)
}
