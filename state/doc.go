// Package state keeps everything a Service proxy knows about its inputs, for
// every IP family it serves: the Services and EndpointSlices (a
// servicemap.Tracker and an endpoints.Tracker per family), the proxy's own
// Node (its name, its zone, its addresses), the cluster's ServiceCIDRs, and
// the EndpointSlices' last-change-trigger-time annotations not yet handed
// to a sync.
//
// Sources write events into a State: UpdateService, DeleteService,
// UpdateSlice, DeleteSlice, UpdateNode, DeleteNode, UpdateServiceCIDR,
// DeleteServiceCIDR, or Replace with a complete set of objects (a relist, a
// manifest file read again). A sync takes a Snapshot and hands each
// family's Services and Endpoints to ruleset.Builder.Update (or Build):
//
//	snap := st.Snapshot()
//	fam, _ := snap.Family(v1.IPv4Protocol)
//	rs, changes, warnings := builder.Update(prev, fam.Services, fam.Endpoints)
//
// Update finds the changed Service ports by comparing the snapshots prev was
// built from with these, so a caller keeps no change lists: after a failed
// sync it keeps its previous Ruleset, takes a new Snapshot later, and
// Update still gives exactly what Build gives. A Builder does all of this
// for every family, and returns each build warning once; ConfigFrom makes
// the Config of each family from one base Config. engine.StateProvider
// hands a Builder's Rulesets to an engine.Engine.
//
// Every event returns the warnings about its object (a malformed object is
// skipped and named, never fatal). A warning is returned once: the event
// that first gives it for its object returns it, and later events for that
// object return it again only after one of them no longer gave it or the
// object was deleted. A dual-stack Service is converted once per family,
// and its warnings come once.
//
// A State is safe for concurrent use. The package is pure: no I/O, no
// clock, no randomness, no logging.
package state
