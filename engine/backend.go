package engine

import (
	"context"
	"errors"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
)

// Backend applies the Rulesets of one IP family to a data plane.
// iptables.Executor and nftables.Executor implement it; so can a data plane
// of one's own. The engine calls its methods from one goroutine at a time.
type Backend interface {
	// Sync makes the data plane hold rs, fully or incrementally as the
	// backend sees fit; after any failure the next Sync must be a full
	// one. SyncResult.NextSync asks the engine to call Sync again that
	// long after this one, even with nothing changed.
	Sync(ctx context.Context, rs *ruleset.Ruleset) (svcproxy.SyncResult, error)
	// RequestFullSync makes the next Sync a full one, which rewrites
	// everything the backend owns, repairing what others changed.
	RequestFullSync()
	// CheckState compares the data plane with the last Sync and says
	// what it found missing or different, classified, the zero Drift when
	// nothing (and before the first Sync). It is called every
	// Config.SyncPeriod; a backend bounds its cost, and may read a large
	// data plane in parts over a few calls (the iptables and nftables
	// executors document theirs).
	CheckState(ctx context.Context) (svcproxy.Drift, error)
	// Cleanup removes everything the backend owns from the data plane.
	Cleanup(ctx context.Context) error
	// Close releases what the backend holds (sockets, namespaces); what it
	// applied stays.
	Close() error
}

// Provider gives the state to sync: the engine calls it at the start of
// every sync, from the goroutine that syncs, and applies what it returns.
// It must return the whole desired state each time (a Ruleset per family
// of Config.Backends), so that a sync that fails loses nothing: the next
// one applies the latest state.
type Provider interface {
	Desired(ctx context.Context) (Desired, error)
}

// ProviderFunc adapts a function to a Provider.
type ProviderFunc func(ctx context.Context) (Desired, error)

// Desired calls f; a nil f is an error.
func (f ProviderFunc) Desired(ctx context.Context) (Desired, error) {
	if f == nil {
		return Desired{}, errors.New("engine: nil ProviderFunc")
	}
	return f(ctx)
}

// Desired is the state one sync applies.
type Desired struct {
	// Rulesets has the Ruleset of every family the engine has a Backend
	// for.
	Rulesets map[v1.IPFamily]*ruleset.Ruleset
	// Triggers are when the changes this state holds were made (as the
	// EndpointSlices' endpoints.kubernetes.io/last-change-trigger-time
	// annotations say), for the network programming latency metric; each
	// is observed once, by the first sync that succeeds after it is given.
	// As in kube-proxy, a time before the Engine was made (New) is not
	// observed: it measures how long the change waited for the proxy to
	// start, not how long the proxy took to program it.
	Triggers []time.Time
	// TriggersByFamily, when not nil, are the Triggers by the IP family of
	// the EndpointSlice that changed, and replace them: each is observed
	// in its family's metric only, as kube-proxy's proxier of that family
	// does. With it nil, each of Triggers is observed in every family.
	TriggersByFamily map[v1.IPFamily][]time.Time
}
