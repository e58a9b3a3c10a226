// Package engine keeps data planes in sync with the desired state of a
// Service proxy: the loop around the pure packages that every proxy needs.
//
// A caller gives an Engine a Provider, which returns the Ruleset of each IP
// family (StateProvider has a state.Builder build them from a state.State,
// incrementally), and a
// Backend per family, which applies a Ruleset: iptables.Executor,
// nftables.Executor, or a data plane of its own. The engine then guarantees:
//
//   - coalescing: Request never blocks; requests made while a sync is
//     pending or running become one later sync, which applies the latest
//     state; two syncs never start closer than Config.MinSyncPeriod;
//   - repair: every Config.SyncPeriod a periodic sync first asks each
//     Backend to check its state (Backend.CheckState), at a bounded cost,
//     and makes the sync of each family where something differs a full
//     one, /healthz failing from then until it succeeds; while changes
//     keep coming the check is put off, for at most one period, so
//     that it does not delay them; every
//     Config.FullSyncPeriod the periodic sync is full in every family,
//     rewriting what no check reads;
//   - retries: a sync that fails is retried after a back-off that doubles
//     from Config.RetryInterval up to SyncPeriod, while a change still
//     syncs as soon as MinSyncPeriod allows; since every sync applies the
//     whole latest state, no change is lost. A configuration error (one
//     that wraps ruleset.ErrConfig) is not retried: the next sync is the
//     next Request's;
//   - follow-up syncs: a Backend that has work left (nftables deletes the
//     chains it flushed only on a later sync) says when in
//     svcproxy.SyncResult.NextSync, and the engine syncs again then;
//   - conntrack: with Config.Conntrack, after each family's sync the UDP
//     entries it made stale are deleted. The engine compares the new
//     Ruleset with the one conntrack was last cleaned against, not with
//     endpoint changes: the entries to a UDP Service deleted before its
//     EndpointSlices go at the Service's delete, and a failed cleanup is
//     retried with nothing forgotten;
//   - health: Health and HealthzHandler report healthy while the last
//     successful sync is younger than twice SyncPeriod and no sync or
//     check has failed since;
//   - metrics: kube-proxy's sync metrics under their names and with its
//     ip_family label, kept per family as kube-proxy's proxier of each
//     family keeps them (Desired.TriggersByFamily), registered only with
//     the Config.Registerer given.
//
// The engine logs nothing: Config.OnSync receives what each sync did
// (results, drift found, conntrack cleanups, errors), and the caller logs
// or counts what it wants. Time comes from Config.Clock.
package engine
