package iptables

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/nfacct"
)

// fakeAcct is the nfacct socket of a fake kernel: Ensure fails for the
// names in refuse.
type fakeAcct struct {
	refuse  map[string]bool
	made    map[string]bool
	ensured int
}

func (a *fakeAcct) Ensure(name string) error {
	a.ensured++
	if a.refuse[name] {
		return errors.New("refused")
	}
	a.made[name] = true
	return nil
}

func (a *fakeAcct) Get(name string) (nfacct.Counter, error) {
	if !a.made[name] {
		return nfacct.Counter{}, nfacct.ErrNotFound
	}
	return nfacct.Counter{Name: name, Packets: 7}, nil
}

func (a *fakeAcct) Close() error { return nil }

// TestExecutorCounters: the rules count into the counters the Executor
// could make, at every full sync, and partial syncs and the state check
// follow what the last full sync rendered; without nfacct the rules are
// Render's.
func TestExecutorCounters(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	cfg.LocalhostNodePorts = true
	one := build(t, cfg, service("ns1", "web", "198.19.0.10", nodePort(30080)),
		slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...))
	two := build(t, cfg, service("ns1", "web", "198.19.0.10", nodePort(30080)),
		slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(3, false)...))

	for _, tc := range []struct {
		name    string
		acct    *fakeAcct
		want    Kernel
		wantErr bool
	}{
		{name: "without NFAcct", want: Kernel{}},
		{name: "both made", acct: &fakeAcct{made: map[string]bool{}},
			want: Kernel{InvalidDroppedCounter: true, LocalhostNodePortsCounter: true}},
		{name: "one refused", acct: &fakeAcct{made: map[string]bool{}, refuse: map[string]bool{CounterLocalhostNodePorts: true}},
			want: Kernel{InvalidDroppedCounter: true}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newFakeKernel(t, v1.IPv4Protocol)
			e := newTestExecutor(t, k)
			if tc.acct != nil {
				e.acct = tc.acct
			}
			if _, err := e.Sync(ctx, one); err != nil {
				t.Fatal(err)
			}
			if e.kernel != tc.want {
				t.Errorf("kernel after the full sync: %+v; want %+v", e.kernel, tc.want)
			}
			if err := e.NFAcctErr(); (err != nil) != tc.wantErr {
				t.Errorf("NFAcctErr: %v; want an error: %v", err, tc.wantErr)
			}
			want, err := applyRestore(newModel(), renderFull(Names{}, one, renderOptions{canary: true, kernel: tc.want}))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, k.tables); d != "" {
				t.Errorf("tables after the full sync are not RenderFor(%+v)'s (-want +got):\n%s", tc.want, d)
			}
			if missing, err := e.CheckState(ctx); missing.Found() || err != nil {
				t.Errorf("CheckState: %+v, %v; want nothing missing", missing, err)
			}
			res, err := e.Sync(ctx, two)
			if err != nil || res.Full {
				t.Fatalf("second Sync: full %v, %v; want a partial sync", res.Full, err)
			}
			want, _ = applyRestore(newModel(), renderFull(Names{}, two, renderOptions{canary: true, kernel: tc.want}))
			if d := cmp.Diff(want, k.tables); d != "" {
				t.Errorf("tables after the partial sync are not RenderFor(%+v)'s (-want +got):\n%s", tc.want, d)
			}
			if tc.acct != nil && tc.acct.ensured != len(nfacctCounters) {
				t.Errorf("%d Ensure calls; want %d, at the full sync only", tc.acct.ensured, len(nfacctCounters))
			}
			n, err := e.Counter(CounterInvalidDropped)
			if tc.want.InvalidDroppedCounter != (err == nil) || err == nil && n != 7 {
				t.Errorf("Counter: %d, %v", n, err)
			}
		})
	}
}
