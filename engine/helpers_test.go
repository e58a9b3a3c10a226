package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/conntrack"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// fakeClock is a Clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After never fires: the tests that use a fakeClock drive syncs themselves.
func (c *fakeClock) After(time.Duration) <-chan time.Time { return nil }

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fakeBackend records the Rulesets it is given and fails or reports
// missing state on demand.
type fakeBackend struct {
	mu        sync.Mutex
	synced    []*ruleset.Ruleset
	fullNext  bool // RequestFullSync was called since the last Sync
	fullSyncs int
	failNext  int            // the number of next Syncs that fail
	drift     svcproxy.Drift // what CheckState reports
	checkErr  error          // what CheckState fails with
	nextSync  time.Duration  // the NextSync of every result
	closed    bool
}

func (b *fakeBackend) Sync(_ context.Context, rs *ruleset.Ruleset) (svcproxy.SyncResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failNext > 0 {
		b.failNext--
		b.fullNext = true
		return svcproxy.SyncResult{}, errors.New("injected failure")
	}
	full := b.fullNext || len(b.synced) == 0
	if full {
		b.fullSyncs++
	}
	b.fullNext, b.drift = false, svcproxy.Drift{}
	b.synced = append(b.synced, rs)
	return svcproxy.SyncResult{Full: full, NextSync: b.nextSync}, nil
}

func (b *fakeBackend) RequestFullSync() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fullNext = true
}

func (b *fakeBackend) CheckState(context.Context) (svcproxy.Drift, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.drift, b.checkErr
}

func (b *fakeBackend) Cleanup(context.Context) error { return nil }

func (b *fakeBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func (b *fakeBackend) last() *ruleset.Ruleset {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.synced) == 0 {
		return nil
	}
	return b.synced[len(b.synced)-1]
}

// world is the Services and EndpointSlices of one IPv4 node, as trackers,
// and the Provider of their Rulesets.
type world struct {
	t        *testing.T
	services *servicemap.Tracker
	slices   *endpoints.Tracker
	builder  *ruleset.Builder
	// sliceChanges are the endpoints.Changes of the last snapshot.
	sliceChanges endpoints.Changes
}

func newWorld(t *testing.T) *world {
	b, err := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol, Node: topology.Node{Name: "node-a"}})
	if err != nil {
		t.Fatal(err)
	}
	return &world{
		t:        t,
		services: servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{}),
		slices:   endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{}),
		builder:  b,
	}
}

// Desired builds the Ruleset of the trackers' state.
func (w *world) Desired(context.Context) (Desired, error) {
	svcs, _ := w.services.Snapshot()
	eps, ch := w.slices.Snapshot()
	w.sliceChanges = ch
	rs, warnings := w.builder.Build(svcs, eps)
	if len(warnings) > 0 {
		return Desired{}, fmt.Errorf("build warnings: %v", warnings)
	}
	return Desired{Rulesets: map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: rs}}, nil
}

// addUDPService adds Service ns1/name with clusterIP, UDP port 53 named
// "dns", and its EndpointSlice with one ready endpoint ep:5353.
func (w *world) addUDPService(name, clusterIP, ep string) {
	w.t.Helper()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: name},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeClusterIP, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
			Ports:      []v1.ServicePort{{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP}},
		},
	}
	if skipped, warnings := w.services.Update(svc); skipped != "" || len(warnings) > 0 {
		w.t.Fatalf("Service %s: %s %v", name, skipped, warnings)
	}
	port, ready, node := int32(5353), true, "node-a"
	es := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns1", Name: name + "-1", Labels: map[string]string{discovery.LabelServiceName: name}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr("dns"), Port: &port, Protocol: ptr(v1.ProtocolUDP)}},
		Endpoints: []discovery.Endpoint{{
			Addresses: []string{ep}, Conditions: discovery.EndpointConditions{Ready: &ready}, NodeName: &node,
		}},
	}
	if skipped, warnings := w.slices.Update(es); skipped != "" || len(warnings) > 0 {
		w.t.Fatalf("EndpointSlice %s: %s %v", es.Name, skipped, warnings)
	}
}

func ptr[T any](v T) *T { return &v }

// conntrackTable is a fake conntrack table: a Cleaner that deletes the
// flows the filters select, as NetlinkCleaner does in the kernel, and
// fails on demand.
type conntrackTable struct {
	flows    map[conntrack.Flow]bool
	failNext bool
	calls    int
}

func (c *conntrackTable) Clean(_ v1.IPFamily, filters []conntrack.Filter) (conntrack.CleanResult, error) {
	c.calls++
	if c.failNext {
		c.failNext = false
		return conntrack.CleanResult{}, errors.New("injected conntrack failure")
	}
	m := conntrack.NewMatcher(filters)
	res := conntrack.CleanResult{Scanned: len(c.flows)}
	for f := range c.flows {
		if m.Matches(f) {
			delete(c.flows, f)
			res.Matched++
			res.Deleted++
		}
	}
	return res, nil
}

// newTestEngine is an Engine over one IPv4 fakeBackend, a fake clock and
// source, with the events it reports.
func newTestEngine(t *testing.T, source Provider, cleaner conntrack.Cleaner) (*Engine, *fakeBackend, *fakeClock, *[]SyncEvent) {
	t.Helper()
	b, clock := &fakeBackend{}, newFakeClock()
	var events []SyncEvent
	e, err := New(Config{
		Backends:      map[v1.IPFamily]Backend{v1.IPv4Protocol: b},
		Provider:      source,
		MinSyncPeriod: time.Second,
		SyncPeriod:    30 * time.Second,
		Conntrack:     cleaner,
		OnSync:        func(ev SyncEvent) { events = append(events, ev) },
		Clock:         clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e, b, clock, &events
}
