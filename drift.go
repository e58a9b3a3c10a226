package svcproxy

// Drift is what a backend's state check (the CheckState method of
// engine.Backend) found different in the data plane from what the backend's
// last sync left there: the first difference it found. The zero Drift is
// nothing found.
type Drift struct {
	// Kind is the kind of object that differs.
	Kind DriftKind
	// What names the object and says how it differs, for a log line:
	// "chain KUBE-SVC-ABC has 2 rules, want 3".
	What string
}

// Found reports whether the check found anything: a Kind or a What.
func (d Drift) Found() bool { return d.Kind != "" || d.What != "" }

// DriftKind classifies a Drift. It is one of the constants below, a bounded
// set that labels the engine's svcproxy_sync_drift_repairs_total metric;
// the engine counts a Kind it does not know as DriftOther.
type DriftKind string

const (
	// DriftTable: a table of the backend's is missing whole.
	DriftTable DriftKind = "table"
	// DriftChain: a chain of the backend's is missing, or one is there
	// that should not be.
	DriftChain DriftKind = "chain"
	// DriftRule: a chain of the backend's has rules missing, added or
	// different (a flushed chain, or a jump between the backend's own
	// chains deleted).
	DriftRule DriftKind = "rule"
	// DriftJump: a jump into the backend's chains from a chain it does
	// not own (a built-in chain) is missing.
	DriftJump DriftKind = "jump"
	// DriftSet: a set of the backend's is missing.
	DriftSet DriftKind = "set"
	// DriftMap: a map of the backend's is missing.
	DriftMap DriftKind = "map"
	// DriftElement: a set or map has elements missing, added or
	// different.
	DriftElement DriftKind = "element"
	// DriftOther: a difference the backend does not classify.
	DriftOther DriftKind = "other"
	// DriftCheckFailed: the check could not run (the engine's kind for a
	// CheckState that returned an error).
	DriftCheckFailed DriftKind = "check-failed"
)

// DriftKinds returns every DriftKind, in the order above.
func DriftKinds() []DriftKind {
	return []DriftKind{DriftTable, DriftChain, DriftRule, DriftJump, DriftSet, DriftMap, DriftElement, DriftOther, DriftCheckFailed}
}
