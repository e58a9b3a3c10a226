package proxy

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/manifests"
)

const (
	// manifestPoll is how often the watcher stats the manifests.
	manifestPoll = 250 * time.Millisecond
	// manifestSettle is how long the manifests must stay unchanged (the
	// same files with the same sizes and modification times) before they
	// are read, so that a file being written is not applied half-way. The
	// writers it waits for (an editor saving, cp, a script writing one
	// document after the other) pause for far less between writes; and a
	// change is read at most manifestPoll + manifestSettle = 750 ms after
	// its last write, which with the read leaves the sync within the
	// documented --min-sync-period + 1 s.
	manifestSettle = 500 * time.Millisecond
)

// manifestWatcher is the watcher of the --manifests and the input it last
// applied.
type manifestWatcher struct {
	*manifests.Watcher
	// applied is the last input applied.
	applied *manifests.Input
}

func newManifestWatcher(path string, settle time.Duration) *manifestWatcher {
	return &manifestWatcher{Watcher: manifests.NewWatcher(path, settle)}
}

// inputCounts is the number of Services, EndpointSlices and Nodes of in,
// for the reload log.
func inputCounts(in *manifests.Input) [3]int {
	if in == nil {
		return [3]int{}
	}
	return [3]int{len(in.Objects.Services), len(in.Objects.EndpointSlices), len(in.Objects.Nodes)}
}

// watch polls the manifests until ctx is done and applies them when they
// changed and settled: it logs what changed by count, warns about files
// that lost most of their objects, and asks for a sync. A broken input is
// reported and counted, and ignored: the rules stay as they were.
func (p *proxy) watch(ctx context.Context, w *manifestWatcher, poll time.Duration) {
	w.Watch(ctx, poll, func(in *manifests.Input) { p.applyManifests(w, in) }, func(err error) {
		p.metrics.manifestErrors.Inc()
		p.log.Error(fmt.Sprintf("bad manifests: %v: keeping the rules as they are", err))
	})
}

// applyManifests replaces the state with in and asks for a sync.
func (p *proxy) applyManifests(w *manifestWatcher, in *manifests.Input) {
	for _, loss := range manifests.Losses(w.applied, in) {
		p.log.Warn("manifest file lost most of its objects; applying it as it is", "file", loss)
	}
	before, after := inputCounts(w.applied), inputCounts(in)
	removed := removedServices(w.applied, in)
	p.metrics.recordManifests(w.applied, in, p.families)
	w.applied = in
	p.metrics.manifestReloads.Inc()
	warnings := p.state.Replace(*in.Objects)
	p.log.Info("manifests reloaded",
		"services", fmt.Sprintf("%d → %d", before[0], after[0]),
		"endpointSlices", fmt.Sprintf("%d → %d", before[1], after[1]),
		"nodes", fmt.Sprintf("%d → %d", before[2], after[2]),
		"servicesRemoved", removed,
		"manifestReload", p.reloads.Add(1))
	p.logWarnings(append(in.Warnings, warnings...))
	p.request()
}

// removedServices is the number of Services (by namespace and name) of
// before that after does not hold.
func removedServices(before, after *manifests.Input) int {
	if before == nil {
		return 0
	}
	kept := make(map[types.NamespacedName]bool, len(after.Objects.Services))
	for _, s := range after.Objects.Services {
		kept[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = true
	}
	removed := 0
	for _, s := range before.Objects.Services {
		if !kept[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] {
			removed++
		}
	}
	return removed
}
