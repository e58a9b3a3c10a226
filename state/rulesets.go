package state

import (
	"errors"
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
)

// ConfigFunc gives the ruleset.Config of one IP family for a Snapshot: fam
// is snap's part of that family, whose node addresses and Service CIDRs a
// Config usually takes. The Builder sets the Config's Family to
// fam.IPFamily. An error that wraps ruleset.ErrConfig is a configuration
// error; any other is taken as passing.
type ConfigFunc func(snap Snapshot, fam Family) (ruleset.Config, error)

// Builder builds the Ruleset of every family of a State's Snapshots,
// incrementally. It guarantees:
//
//   - each Ruleset is exactly what ruleset.Builder.Build gives for the
//     Snapshot and the Config that the ConfigFunc gives for it; it is made
//     with ruleset.Builder.Update from the Ruleset of the last build that
//     succeeded, so that a build costs in proportion to what changed (all
//     of it when the Config changed);
//   - the Snapshot's trigger times come out with the Rulesets; when a
//     build fails, they come out with the next one that succeeds;
//   - each build warning (a Service port that the ruleset.Builder cannot
//     serve as asked) comes out once while it persists: the build that
//     first gives it returns it, later ones do not, whatever else changes,
//     until a build after a change of its Service (or the Service's
//     deletion, or a change of the Config) no longer gives it; then it is
//     returned again if it comes back. A warning that both families give
//     comes out once.
//
// It depends on the pure packages only: a program that builds Rulesets
// from a State links neither an engine nor a backend. It logs nothing and
// reads no clock. A Builder is safe for concurrent use; builds run one at
// a time. The zero Builder has no ConfigFunc: make one with NewBuilder.
type Builder struct {
	config ConfigFunc

	mu sync.Mutex
	// built is, per family, the last build that succeeded.
	built map[v1.IPFamily]build
	// warned holds the warnings of the last build of each Service, per
	// family.
	warned map[warnedKey][]svcproxy.Warning
	// triggers are the trigger times of Snapshots whose build failed,
	// and familyTriggers the same by family.
	triggers       []time.Time
	familyTriggers map[v1.IPFamily][]time.Time
}

// Built is what one build gives.
type Built struct {
	// Rulesets has the Ruleset of every family of the Snapshot.
	Rulesets map[v1.IPFamily]*ruleset.Ruleset
	// Triggers are the trigger times of the Snapshot, and of those before
	// it whose build failed; TriggersByFamily are those of the
	// EndpointSlices of each family (Family.TriggerTimes).
	Triggers         []time.Time
	TriggersByFamily map[v1.IPFamily][]time.Time
	// Warnings are the build warnings not returned before (see Builder).
	Warnings []svcproxy.Warning
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

// NewBuilder returns a Builder that builds Rulesets with the Configs that
// config gives (ConfigFrom makes one from a base Config).
func NewBuilder(config ConfigFunc) (*Builder, error) {
	if config == nil {
		return nil, errors.New("state: no ConfigFunc")
	}
	return &Builder{config: config, built: map[v1.IPFamily]build{}, warned: map[warnedKey][]svcproxy.Warning{}}, nil
}

// Build builds the Ruleset of every family of snap, a Snapshot of a State.
// On error, nothing is built: the next build starts from the same
// Rulesets. A Config that the ConfigFunc fails to give, or that
// ruleset.NewBuilder refuses, is an error naming the family; it wraps
// ruleset.ErrConfig when the Config is invalid.
func (b *Builder) Build(snap Snapshot) (Built, error) {
	if b == nil || b.config == nil {
		return Built{}, errors.New("state: Builder not made by NewBuilder")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.triggers = append(b.triggers, snap.TriggerTimes...)
	if b.familyTriggers == nil {
		b.familyTriggers = map[v1.IPFamily][]time.Time{}
	}
	for _, fam := range snap.Families() {
		if len(fam.TriggerTimes) > 0 {
			b.familyTriggers[fam.IPFamily] = append(b.familyTriggers[fam.IPFamily], fam.TriggerTimes...)
		}
	}
	next := map[v1.IPFamily]build{}
	var results []familyWarnings
	for _, fam := range snap.Families() {
		fb, r, err := b.buildFamily(snap, fam)
		if err != nil {
			return Built{}, err
		}
		next[fam.IPFamily], results = fb, append(results, r)
	}
	out := Built{Rulesets: map[v1.IPFamily]*ruleset.Ruleset{}, Triggers: b.triggers, TriggersByFamily: b.familyTriggers}
	for f, fb := range next {
		out.Rulesets[f] = fb.rs
	}
	b.built, b.triggers, b.familyTriggers = next, nil, nil
	out.Warnings = b.recordWarnings(results)
	return out, nil
}

// familyWarnings are the warnings of the Services that one family's build
// rebuilt, and those Services: nil when it rebuilt all of them.
type familyWarnings struct {
	family   v1.IPFamily
	rebuilt  map[types.NamespacedName]bool
	warnings []svcproxy.Warning
}

// buildFamily builds the Ruleset of fam from the family's last build.
func (b *Builder) buildFamily(snap Snapshot, fam Family) (build, familyWarnings, error) {
	cfg, err := b.config(snap, fam)
	var rb *ruleset.Builder
	if err == nil {
		cfg.Family = fam.IPFamily
		rb, err = ruleset.NewBuilder(cfg)
	}
	if err != nil {
		return build{}, familyWarnings{}, fmt.Errorf("building the %s Ruleset: %w", fam.IPFamily, err)
	}
	prev := b.built[fam.IPFamily]
	rs, changes, warnings := rb.Update(prev.rs, fam.Services, fam.Endpoints)
	r := familyWarnings{family: fam.IPFamily, warnings: warnings}
	if prev.rs != nil && !changes.ConfigChanged {
		r.rebuilt, r.warnings = serviceWarnings(rb, prev.services, fam)
	}
	return build{rs, fam.Services}, r, nil
}

// serviceWarnings returns the Services whose ServicePorts differ between
// since and fam, and the warnings of all their ports. A ruleset.Builder
// warns about a port's spec under its Config (an externalIP that the
// Config does not allow, say), not about its endpoints: under the same
// Config, the warnings of every other Service are those of its last build.
func serviceWarnings(rb *ruleset.Builder, since servicemap.Snapshot, fam Family) (map[types.NamespacedName]bool, []svcproxy.Warning) {
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
	_, _, warnings := rb.UpdatePorts(nil, fam.Services, fam.Endpoints, ports)
	return changed, warnings
}

// recordWarnings makes the warnings of each rebuilt Service those of this
// build, and returns those that no family's previous warnings of the same
// Service had, each once.
func (b *Builder) recordWarnings(results []familyWarnings) []svcproxy.Warning {
	previous := map[types.NamespacedName][]svcproxy.Warning{}
	for k, ws := range b.warned {
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
		for k := range b.warned {
			if k.family == r.family && (r.rebuilt == nil || r.rebuilt[k.service]) {
				delete(b.warned, k)
			}
		}
		for svc, ws := range now {
			b.warned[warnedKey{r.family, svc}] = ws
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
//     (Family.NodeAddresses);
//   - ServiceCIDRs are base's and the Snapshot's (the ServiceCIDR objects)
//     of the family, sorted, each once.
//
// It checks base at once: what ruleset.Config.Validate refuses in it, for
// either family (a MasqueradeMark of two bits, a prefix that is not
// valid), is an error that wraps ruleset.ErrConfig.
func ConfigFrom(base ruleset.Config) (ConfigFunc, error) {
	config := func(snap Snapshot, fam Family) (ruleset.Config, error) {
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
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		cfg, _ := config(Snapshot{}, Family{IPFamily: f})
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
	}
	return config, nil
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
