// Package source feeds a state.State from a Kubernetes API server with
// client-go informers: the Services and EndpointSlices that the State's
// servicemap.Filter selects (its label selector is sent to the server), the
// proxy's own Node (selected by name), and the networking.k8s.io/v1
// ServiceCIDRs when the server serves them.
//
// The informers call the State's event methods; nothing is logged. The
// warnings of the events go to a callback, every event asks for a sync
// through another, and a third may see each event's object (to count
// them). Watch waits for the first lists; Start does not, so that a proxy
// can start while the API server is away.
package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/state"
)

// DefaultSyncTimeout is how long Watch waits for the first lists when
// Options.SyncTimeout is zero.
const DefaultSyncTimeout = time.Minute

// Options are the callbacks of Watch. They are called from the informers'
// goroutines, one event at a time per kind of object, and must not block
// for long.
type Options struct {
	// OnChange, if set, is called after each event has reached the State.
	OnChange func()
	// OnEvent, if set, is called with the object of each event before it
	// reaches the State: a *v1.Service, *discovery.EndpointSlice, *v1.Node
	// or *networkingv1.ServiceCIDR added or updated, or the last state
	// known of one deleted (also from a tombstone). An update that changes
	// nothing is an event too: kube-proxy counts its changes metrics
	// from these events.
	OnEvent func(obj any)
	// OnWarnings, if set, receives the warnings of an event (never an
	// empty list): see state.State for when a warning is reported.
	OnWarnings func([]svcproxy.Warning)
	// OnError, if set, receives each failure of the discovery that
	// precedes the informers (Start retries it); the informers' own
	// failures are client-go's to retry.
	OnError func(error)
	// SyncTimeout bounds Watch's wait for the first lists; zero means
	// DefaultSyncTimeout. Start does not wait.
	SyncTimeout time.Duration
}

// Watch starts informers on client that feed st until ctx is done, and
// returns once their first lists have reached st, or with an error when
// they could not be made or did not sync in time. It reports whether the
// server serves networking.k8s.io/v1 ServiceCIDRs: when it does not, st
// gets none and Watch does not watch them. It is Start, waiting at most
// Options.SyncTimeout.
func Watch(ctx context.Context, client kubernetes.Interface, st *state.State, opts Options) (serviceCIDRs bool, err error) {
	w, err := Start(ctx, client, st, opts)
	if err != nil {
		return false, err
	}
	timeout := cmp.Or(opts.SyncTimeout, DefaultSyncTimeout)
	select {
	case <-w.Synced():
		return w.ServiceCIDRs(), nil
	case <-ctx.Done():
		return false, ctx.Err()
	case <-time.After(timeout):
		if err := w.LastError(); err != nil {
			return false, fmt.Errorf("the first lists did not reach the State within %v: %w", timeout, err)
		}
		return false, fmt.Errorf("the first lists did not reach the State within %v", timeout)
	}
}

// Watcher is a watch Start began: it runs until the context given to Start
// is done.
type Watcher struct {
	synced       chan struct{}
	serviceCIDRs bool
	mu           sync.Mutex
	lastErr      error
}

// Synced is closed once the first lists of every informer have reached
// the State: from then on a Snapshot holds the cluster.
// A nil Watcher is never synced.
func (w *Watcher) Synced() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.synced
}

// ServiceCIDRs reports whether the server serves networking.k8s.io/v1
// ServiceCIDRs (and they are watched); it is known once Synced is closed.
func (w *Watcher) ServiceCIDRs() bool {
	if w == nil {
		return false
	}
	select {
	case <-w.synced:
		return w.serviceCIDRs
	default:
		return false
	}
}

// LastError is the last error of the discovery that precedes the
// informers, nil once it succeeded.
func (w *Watcher) LastError() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// Start begins to feed st from client until ctx is done, and returns at
// once: the API server need not be reachable. In the background it asks
// the server whether it serves ServiceCIDRs, retrying with a back-off of
// 0.5 s doubling up to 8 s until it answers (each failure goes to
// Options.OnError), then starts the informers, which list and watch again
// on their own after any failure (client-go's back-off), and closes
// Watcher.Synced once their first lists have reached st. It fails only on
// a Filter that makes no label selector, or without a client or a State.
func Start(ctx context.Context, client kubernetes.Interface, st *state.State, opts Options) (*Watcher, error) {
	if client == nil || st == nil {
		return nil, errors.New("source: Watch needs a client and a State")
	}
	selector, err := st.Filter().LabelSelector()
	if err != nil {
		return nil, err
	}
	w := &Watcher{synced: make(chan struct{})}
	go func() {
		serviceCIDRs, ok := w.discover(ctx, client, opts)
		if !ok {
			return
		}
		w.serviceCIDRs = serviceCIDRs
		if w.run(ctx, client, st, opts, selector.String()) {
			close(w.synced)
		}
	}()
	return w, nil
}

// discover asks the server whether it serves ServiceCIDRs until it
// answers or ctx is done (ok false).
func (w *Watcher) discover(ctx context.Context, client kubernetes.Interface, opts Options) (serviceCIDRs, ok bool) {
	const first, most = 500 * time.Millisecond, 8 * time.Second
	for wait := first; ; wait = min(2*wait, most) {
		serviceCIDRs, err := servesServiceCIDRs(client)
		w.mu.Lock()
		w.lastErr = err
		w.mu.Unlock()
		if err == nil {
			return serviceCIDRs, true
		}
		if opts.OnError != nil {
			opts.OnError(err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, false
		case <-t.C:
		}
	}
}

// run starts the informers and waits until their first lists have reached
// st (true) or ctx is done (false).
func (w *Watcher) run(ctx context.Context, client kubernetes.Interface, st *state.State, opts Options, selector string) bool {
	const resync = 0 // a sync loop repairs on its own schedule
	proxied := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	ownNode := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", st.NodeName()).String()
		}))
	cluster := informers.NewSharedInformerFactory(client, resync)

	handlers, err := addHandlers(st, opts, proxied, ownNode, cluster, w.serviceCIDRs)
	if err != nil {
		if opts.OnError != nil {
			opts.OnError(err)
		}
		return false
	}
	factories := []informers.SharedInformerFactory{proxied, ownNode, cluster}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	for _, f := range factories {
		for _, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return false
			}
		}
	}
	// A full cache is not yet a full State: the handlers may still be
	// delivering the first lists' objects.
	delivered := make([]cache.InformerSynced, len(handlers))
	for i, h := range handlers {
		delivered[i] = h.HasSynced
	}
	return cache.WaitForCacheSync(ctx.Done(), delivered...)
}

// servesServiceCIDRs reports whether the server serves the ServiceCIDR
// resource of networking.k8s.io/v1.
func servesServiceCIDRs(client kubernetes.Interface) (bool, error) {
	gv := networkingv1.SchemeGroupVersion.String()
	resources, err := client.Discovery().ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", gv, err)
	}
	return slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "servicecidrs" }), nil
}

// addHandlers registers what the events of each informer do to st: the
// Services and EndpointSlices of proxied, the Node of ownNode, and, when
// watched, the ServiceCIDRs of cluster.
func addHandlers(st *state.State, opts Options, proxied, ownNode, cluster informers.SharedInformerFactory, serviceCIDRs bool) ([]cache.ResourceEventHandlerRegistration, error) {
	registrations := []registration{
		{proxied.Core().V1().Services().Informer(),
			handler(opts, st.UpdateService, func(svc *v1.Service) { st.DeleteService(svc.Namespace, svc.Name) })},
		{proxied.Discovery().V1().EndpointSlices().Informer(),
			handler(opts, st.UpdateSlice, func(es *discovery.EndpointSlice) { st.DeleteSlice(es.Namespace, es.Name) })},
		{ownNode.Core().V1().Nodes().Informer(),
			handler(opts, st.UpdateNode, func(n *v1.Node) { st.DeleteNode(n.Name) })},
	}
	if serviceCIDRs {
		registrations = append(registrations, registration{cluster.Networking().V1().ServiceCIDRs().Informer(),
			handler(opts, st.UpdateServiceCIDR, func(sc *networkingv1.ServiceCIDR) { st.DeleteServiceCIDR(sc.Name) })})
	}
	var (
		handlers []cache.ResourceEventHandlerRegistration
		errs     []error
	)
	for _, r := range registrations {
		h, err := r.informer.AddEventHandler(r.handler)
		if err != nil {
			errs = append(errs, fmt.Errorf("event handler: %w", err))
			continue
		}
		handlers = append(handlers, h)
	}
	return handlers, errors.Join(errs...)
}

// registration is an informer and what its events do.
type registration struct {
	informer cache.SharedIndexInformer
	handler  cache.ResourceEventHandler
}

// handler turns the events of objects of type T into calls of update and
// del, then reports the warnings and the change.
func handler[T any](opts Options, update func(T) []svcproxy.Warning, del func(T)) cache.ResourceEventHandlerFuncs {
	updated := func(obj any) {
		if t, ok := obj.(T); ok {
			if opts.OnEvent != nil {
				opts.OnEvent(t)
			}
			if w := update(t); len(w) > 0 && opts.OnWarnings != nil {
				opts.OnWarnings(w)
			}
		}
		if opts.OnChange != nil {
			opts.OnChange()
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    updated,
		UpdateFunc: func(_, obj any) { updated(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := unwrap[T](obj); ok {
				if opts.OnEvent != nil {
					opts.OnEvent(t)
				}
				del(t)
			}
			if opts.OnChange != nil {
				opts.OnChange()
			}
		},
	}
}

// unwrap returns the object of a delete event, which may come as a
// tombstone when the watch missed the delete.
func unwrap[T any](obj any) (T, bool) {
	if t, ok := obj.(T); ok {
		return t, true
	}
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		t, ok := tomb.Obj.(T)
		return t, ok
	}
	var zero T
	return zero, false
}
