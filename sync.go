package svcproxy

import (
	"errors"
	"time"
)

// ErrFullSyncNeeded reports that only a full sync can bring the kernel to
// the desired state: there is no previous Ruleset to compute changes from,
// or the two Rulesets were built with different Configs. Every backend of
// this module wraps this one value, so that errors.Is(err,
// ErrFullSyncNeeded) holds whichever backend returned it.
var ErrFullSyncNeeded = errors.New("a full sync is needed")

// SyncResult is what a backend's Sync reports, in the same terms for every
// backend: it is the result of the Sync method of engine.Backend, which
// iptables.Executor and nftables.Executor implement. A backend's own account
// of a sync is its own type (iptables.SyncDetails, nftables.SyncDetails,
// each with its SyncResult), which its Executor's Apply returns.
type SyncResult struct {
	// Full is true when the sync rewrote everything the backend owns,
	// false when it applied only what changed (or nothing).
	Full bool
	// NextSync, when positive, is how long after this sync the backend
	// needs Sync to be called again, with the same Ruleset if nothing
	// changed, to finish work it left pending (nftables deletes chains it
	// flushed only on a later sync). Zero means nothing is pending.
	NextSync time.Duration
	// Warnings are the objects the backend skipped while rendering.
	Warnings []Warning
}
