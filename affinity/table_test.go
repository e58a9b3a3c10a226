package affinity_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/affinity"
)

var (
	targetA = netip.MustParseAddrPort("198.18.64.2:80")
	targetB = netip.MustParseAddrPort("198.18.65.2:80")
	client  = netip.MustParseAddr("198.18.32.2")
	start   = time.Unix(1000, 0)
)

func clientIP(t *testing.T, seconds int32) affinity.Policy {
	t.Helper()
	if seconds == 0 {
		return affinity.Policy{}
	}
	p, err := affinity.ClientIP(seconds)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func always(netip.AddrPort) bool { return true }

// TestTableChoose: a first flow to "web" goes to targetA; a later one goes
// to targetA again while the affinity holds, otherwise to the new pick,
// targetB.
func TestTableChoose(t *testing.T) {
	tests := []struct {
		name          string
		before, after int32 // the timeout at the first flow and at the later one; 0: no affinity
		later         time.Duration
		port          string
		from          netip.Addr
		offered       func(netip.AddrPort) bool
		want          netip.AddrPort
	}{
		{"within the timeout", 10, 10, 9 * time.Second, "web", client, always, targetA},
		{"at the timeout", 10, 10, 10 * time.Second, "web", client, always, targetB},
		{"timeout since lowered, within the new one", 10800, 10, 9 * time.Second, "web", client, always, targetA},
		{"timeout since lowered, past the new one", 10800, 10, 10 * time.Second, "web", client, always, targetB},
		{"timeout since raised", 10, 10800, time.Hour, "web", client, always, targetA},
		{"target no longer offered", 10, 10, time.Second, "web", client, func(t netip.AddrPort) bool { return t != targetA }, targetB},
		{"another client", 10, 10, time.Second, "web", netip.MustParseAddr("198.18.32.3"), always, targetB},
		{"another Service port", 10, 10, time.Second, "db", client, always, targetB},
		{"a time before the last flow", 10, 10, -time.Second, "web", client, always, targetB},
		{"affinity turned on since", 0, 10, time.Second, "web", client, always, targetB},
		{"affinity turned off since", 10, 0, time.Second, "web", client, always, targetB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var table affinity.Table[string]
			if got := table.Choose("web", client, clientIP(t, tt.before), start, always, func() netip.AddrPort { return targetA }); got != targetA {
				t.Fatalf("first flow went to %v, want the pick %v", got, targetA)
			}
			got := table.Choose(tt.port, tt.from, clientIP(t, tt.after), start.Add(tt.later), tt.offered, func() netip.AddrPort { return targetB })
			if got != tt.want {
				t.Errorf("later flow went to %v, want %v", got, tt.want)
			}
		})
	}
}

// TestTableRefresh: each new flow restarts the timeout, and a new pick
// replaces the recorded target.
func TestTableRefresh(t *testing.T) {
	var table affinity.Table[string]
	p := clientIP(t, 10)
	pick := func(target netip.AddrPort) func() netip.AddrPort { return func() netip.AddrPort { return target } }
	steps := []struct {
		at      time.Duration
		offered func(netip.AddrPort) bool
		pick    netip.AddrPort
		want    netip.AddrPort
	}{
		{0, always, targetA, targetA},
		{8 * time.Second, always, targetB, targetA},
		{16 * time.Second, always, targetB, targetA}, // 8 s after the last flow
		{17 * time.Second, func(t netip.AddrPort) bool { return t != targetA }, targetB, targetB},
		{18 * time.Second, always, targetA, targetB},
	}
	for i, s := range steps {
		if got := table.Choose("web", client, p, start.Add(s.at), s.offered, pick(s.pick)); got != s.want {
			t.Errorf("flow %d at +%v went to %v, want %v", i, s.at, got, s.want)
		}
	}
}

// TestTableExpire: Expire forgets exactly the affinities whose timeout (as
// recorded) has passed; Choose without affinity records nothing.
func TestTableExpire(t *testing.T) {
	var table affinity.Table[string]
	pickA := func() netip.AddrPort { return targetA }
	table.Choose("none", client, affinity.Policy{}, start, always, pickA)
	table.Choose("short", client, clientIP(t, 10), start, always, pickA)
	table.Choose("long", client, clientIP(t, 20), start, always, pickA)
	for _, step := range []struct {
		at   time.Duration
		want int
	}{{9 * time.Second, 2}, {10 * time.Second, 1}, {19 * time.Second, 1}, {20 * time.Second, 0}} {
		table.Expire(start.Add(step.at))
		if got := table.Len(); got != step.want {
			t.Errorf("after Expire at +%v: %d affinities, want %d", step.at, got, step.want)
		}
	}
}

// TestTableConcurrent: concurrent first flows of one client all go to the
// one target picked first, under the race detector too.
func TestTableConcurrent(t *testing.T) {
	var table affinity.Table[string]
	var mu sync.Mutex
	picks := 0
	pick := func() netip.AddrPort {
		mu.Lock()
		defer mu.Unlock()
		picks++
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 64, byte(picks)}), 80)
	}
	p := clientIP(t, 10)
	got := make([]netip.AddrPort, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i] = table.Choose("web", client, p, start, always, pick) })
	}
	wg.Wait()
	for i, g := range got {
		if g != got[0] {
			t.Fatalf("flow %d went to %v, flow 0 to %v", i, g, got[0])
		}
	}
	if picks != 1 {
		t.Errorf("%d picks, want 1", picks)
	}
}
