package engine

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

// ConfigFunc gives the ruleset.Config of one IP family for a Snapshot: fam
// is snap's part of that family, whose node addresses and Service CIDRs a
// Config usually takes. The StateSource sets the Config's Family to
// fam.Family.
type ConfigFunc func(snap state.Snapshot, fam state.Family) (ruleset.Config, error)

// StateSource is the Provider of an Engine fed by a state.State: each
// Desired takes a Snapshot and builds the Ruleset of every family the State
// serves. It guarantees:
//
//   - each Ruleset is exactly what ruleset.Builder.Build gives for the
//     Snapshot and the Config that ConfigFunc gives for it; it is made
//     with Builder.Update from the Ruleset of the last build that
//     succeeded, so that a sync costs in proportion to what changed (all
//     of it when the Config changed);
//   - the Snapshot's trigger times go to the Engine with the Rulesets; when
//     a build fails, they go with the next one that succeeds;
//   - each build warning (a Service port that the Builder cannot serve as
//     asked) goes to onWarnings once while it persists: the build that
//     first gives it reports it, later ones do not, whatever else changes,
//     until a build after a change of its Service (or the Service's
//     deletion, or a change of the Config) no longer gives it; then it is
//     reported again if it comes back. A warning that both families give
//     is reported once.
//
// It logs nothing and reads no clock. A StateSource is safe for concurrent
// use; builds run one at a time.
type StateSource struct {
	state      *state.State
	config     ConfigFunc
	onWarnings func([]svcproxy.Warning)

	mu sync.Mutex
	// built is, per family, the last build that succeeded.
	built map[v1.IPFamily]build
	// warned holds the warnings of the last build of each Service, per
	// family.
	warned map[warnedKey][]svcproxy.Warning
	// triggers are the trigger times of Snapshots whose build failed.
	triggers []time.Time
}

// build is a family's Ruleset and the Services it was built from.
type build struct {
	rs       *ruleset.Ruleset
	services servicemap.Snapshot
}

type warnedKey struct {
	family  v1.IPFamily
	service types.NamespacedName
}

// NewStateSource returns a StateSource that builds the Rulesets of st with
// the Configs that config gives. onWarnings, when not nil, receives the
// build warnings (never an empty list), from the goroutine that calls
// Desired or Build, once the build is done.
func NewStateSource(st *state.State, config ConfigFunc, onWarnings func([]svcproxy.Warning)) *StateSource {
	return &StateSource{state: st, config: config, onWarnings: onWarnings,
		built: map[v1.IPFamily]build{}, warned: map[warnedKey][]svcproxy.Warning{}}
}

// Desired builds the Rulesets of a new Snapshot of the State (see Build).
func (s *StateSource) Desired(context.Context) (Desired, error) {
	return s.Build(s.state.Snapshot())
}

// Build builds the Ruleset of every family of snap, a Snapshot of the
// State, for a caller that needs the Snapshot too (say, for the addresses
// of its health check servers). On error, nothing is built: the next build
// starts from the same Rulesets.
func (s *StateSource) Build(snap state.Snapshot) (Desired, error) {
	d, fresh, err := s.build(snap)
	if len(fresh) > 0 && s.onWarnings != nil {
		s.onWarnings(fresh)
	}
	return d, err
}

// build is Build but for reporting the warnings it returns.
func (s *StateSource) build(snap state.Snapshot) (Desired, []svcproxy.Warning, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.triggers = append(s.triggers, snap.TriggerTimes...)
	next := map[v1.IPFamily]build{}
	var results []familyWarnings
	for _, fam := range snap.Families() {
		b, r, err := s.buildFamily(snap, fam)
		if err != nil {
			return Desired{}, nil, err
		}
		next[fam.IPFamily], results = b, append(results, r)
	}
	d := Desired{Rulesets: map[v1.IPFamily]*ruleset.Ruleset{}, Triggers: s.triggers}
	for f, b := range next {
		d.Rulesets[f] = b.rs
	}
	s.built, s.triggers = next, nil
	return d, s.recordWarnings(results), nil
}

// familyWarnings are the warnings of the Services that one family's build
// rebuilt, and those Services: nil when it rebuilt all of them.
type familyWarnings struct {
	family   v1.IPFamily
	rebuilt  map[types.NamespacedName]bool
	warnings []svcproxy.Warning
}

// buildFamily builds the Ruleset of fam from the family's last build.
func (s *StateSource) buildFamily(snap state.Snapshot, fam state.Family) (build, familyWarnings, error) {
	cfg, err := s.config(snap, fam)
	var b *ruleset.Builder
	if err == nil {
		cfg.Family = fam.IPFamily
		b, err = ruleset.NewBuilder(cfg)
	}
	if err != nil {
		return build{}, familyWarnings{}, fmt.Errorf("ruleset config of %s: %w", fam.IPFamily, err)
	}
	prev := s.built[fam.IPFamily]
	rs, changes, warnings := b.Update(prev.rs, fam.Services, fam.Endpoints)
	r := familyWarnings{family: fam.IPFamily, warnings: warnings}
	if prev.rs != nil && !changes.ConfigChanged {
		r.rebuilt, r.warnings = serviceWarnings(b, prev.services, fam)
	}
	return build{rs, fam.Services}, r, nil
}

// serviceWarnings returns the Services whose ServicePorts differ between
// since and fam, and the warnings of all their ports. A Builder warns about
// a port's spec under its Config (an externalIP that the Config does not
// allow, say), not about its endpoints: under the same Config, the
// warnings of every other Service are those of its last build.
func serviceWarnings(b *ruleset.Builder, since servicemap.Snapshot, fam state.Family) (map[types.NamespacedName]bool, []svcproxy.Warning) {
	sch := fam.Services.ChangesSince(since)
	changed := map[types.NamespacedName]bool{}
	var ports []servicemap.PortName
	for _, n := range slices.Concat(sch.Added, sch.Changed, sch.Removed) {
		svc := types.NamespacedName{Namespace: n.Namespace, Name: n.Name}
		if changed[svc] {
			continue
		}
		changed[svc] = true
		for _, sp := range fam.Services.Service(n.Namespace, n.Name) {
			ports = append(ports, sp.Name)
		}
	}
	if len(ports) == 0 {
		return changed, nil
	}
	_, _, warnings := b.UpdatePorts(nil, fam.Services, fam.Endpoints, ports)
	return changed, warnings
}

// recordWarnings makes the warnings of each rebuilt Service those of this
// build, and returns those that no family's previous warnings of the same
// Service had, each once.
func (s *StateSource) recordWarnings(results []familyWarnings) []svcproxy.Warning {
	previous := map[types.NamespacedName][]svcproxy.Warning{}
	for k, ws := range s.warned {
		previous[k.service] = append(previous[k.service], ws...)
	}
	var fresh []svcproxy.Warning
	for _, r := range results {
		now := map[types.NamespacedName][]svcproxy.Warning{}
		for _, w := range r.warnings {
			svc := types.NamespacedName{Namespace: w.Namespace, Name: w.Name}
			now[svc] = append(now[svc], w)
			if !slices.Contains(previous[svc], w) && !slices.Contains(fresh, w) {
				fresh = append(fresh, w)
			}
		}
		for k := range s.warned {
			if k.family == r.family && (r.rebuilt == nil || r.rebuilt[k.service]) {
				delete(s.warned, k)
			}
		}
		for svc, ws := range now {
			s.warned[warnedKey{r.family, svc}] = ws
		}
	}
	return fresh
}

// ConfigFrom returns a ConfigFunc that gives base completed for each family
// from the Snapshot, so that base may hold the addresses and prefixes of
// both families at once (as a proxy's flags do):
//
//   - Family is the family's, and Node the Snapshot's;
//   - ClusterCIDRs, AllowedExternalIPs and NodePortAddresses are base's of
//     the family only; when base has no NodePortAddresses of either
//     family, they are the Node's addresses of the family
//     (state.Family.NodeAddresses);
//   - ServiceCIDRs are base's and the Snapshot's (the ServiceCIDR objects)
//     of the family, sorted, each once.
func ConfigFrom(base ruleset.Config) ConfigFunc {
	return func(snap state.Snapshot, fam state.Family) (ruleset.Config, error) {
		cfg := base
		is4 := fam.IPFamily == v1.IPv4Protocol
		ofFamily := func(p netip.Prefix) bool { return p.Addr().Is4() == is4 }
		cfg.Family, cfg.Node = fam.IPFamily, snap.Node
		cfg.ClusterCIDRs = filter(base.ClusterCIDRs, ofFamily)
		cfg.AllowedExternalIPs = filter(base.AllowedExternalIPs, ofFamily)
		cfg.NodePortAddresses = filter(base.NodePortAddresses, func(a netip.Addr) bool { return a.Is4() == is4 })
		if len(base.NodePortAddresses) == 0 {
			cfg.NodePortAddresses = slices.Clone(fam.NodeAddresses)
		}
		cfg.ServiceCIDRs = append(filter(base.ServiceCIDRs, ofFamily), fam.ServiceCIDRs...)
		slices.SortFunc(cfg.ServiceCIDRs, netip.Prefix.Compare)
		cfg.ServiceCIDRs = slices.Compact(cfg.ServiceCIDRs)
		return cfg, nil
	}
}

// filter returns the elements of xs that keep is true for, in a new slice.
func filter[T any](xs []T, keep func(T) bool) []T {
	var out []T
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}
