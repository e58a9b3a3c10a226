package affinity

import (
	"maps"
	"net/netip"
	"sync"
	"time"
)

// Table is the ClientIP affinity state of a data plane that picks targets
// itself (a user-space proxy, say): for each Service port (of key type K)
// and client address, the target of the client's last new flow and when
// that stickiness expires. The zero Table is empty and ready to use. A
// Table is safe for concurrent use. The caller passes the time in; the
// Table never reads a clock.
type Table[K comparable] struct {
	mu      sync.Mutex
	entries map[tableKey[K]]tableEntry
}

type tableKey[K comparable] struct {
	port   K
	client netip.Addr
}

type tableEntry struct {
	target  netip.AddrPort
	last    time.Time     // of the client's last new flow
	timeout time.Duration // the Policy's then
}

// Choose returns the target of a new flow at now from client to port, whose
// affinity is p. With p enabled it is the target of the client's last new
// flow to port when all of these hold, and otherwise pick():
//   - that flow began less than p's timeout before now (and not after
//     now), with p's timeout as it is now: a timeout lowered since applies
//     at once, a raised one extends the stickiness;
//   - offered(target) is true: a target the Service no longer offers the
//     client is never reused.
//
// With p enabled, the chosen target is recorded as the client's last,
// at now.
// With p disabled, Choose returns pick() and records nothing. Choose calls
// offered and pick with the Table locked: they must not use the Table.
func (t *Table[K]) Choose(port K, client netip.Addr, p Policy, now time.Time, offered func(netip.AddrPort) bool, pick func() netip.AddrPort) netip.AddrPort {
	if !p.Enabled() {
		return pick()
	}
	timeout, key := time.Duration(p.Seconds())*time.Second, tableKey[K]{port, client}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[key]
	if !ok || now.Sub(e.last) >= timeout || now.Before(e.last) || !offered(e.target) {
		e.target = pick()
	}
	if t.entries == nil {
		t.entries = map[tableKey[K]]tableEntry{}
	}
	t.entries[key] = tableEntry{e.target, now, timeout}
	return e.target
}

// Expire forgets every affinity whose last new flow began at least its
// timeout before now, with the timeout its Policy had at that flow (an
// affinity whose timeout was raised since may thus be forgotten early).
// A caller calls it now and then to bound the Table's size.
func (t *Table[K]) Expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	maps.DeleteFunc(t.entries, func(_ tableKey[K], e tableEntry) bool { return now.Sub(e.last) >= e.timeout })
}

// Len is the number of affinities the Table holds, expired or not.
func (t *Table[K]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}
