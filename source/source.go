// Package source feeds a state.State from a Kubernetes API server with
// client-go informers: the Services and EndpointSlices that the State's
// servicemap.Filter selects (its label selector is sent to the server), the
// proxy's own Node (selected by name), and the networking.k8s.io/v1
// ServiceCIDRs when the server serves them.
//
// The informers call the State's event methods; nothing is logged. The
// warnings of the events go to a callback, and every event asks for a sync
// through another.
package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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
	// OnWarnings, if set, receives the warnings of an event (never an
	// empty list): see state.State for when a warning is reported.
	OnWarnings func([]svcproxy.Warning)
	// SyncTimeout bounds the wait for the first lists; zero means
	// DefaultSyncTimeout.
	SyncTimeout time.Duration
}

// Watch starts informers on client that feed st until ctx is done, and
// returns once their first lists have reached st, or with an error when
// they could not be made or did not sync in time. It reports whether the
// server serves networking.k8s.io/v1 ServiceCIDRs: when it does not, st
// gets none and Watch does not watch them.
func Watch(ctx context.Context, client kubernetes.Interface, st *state.State, opts Options) (serviceCIDRs bool, err error) {
	if client == nil || st == nil {
		return false, errors.New("source: Watch needs a client and a State")
	}
	selector, err := st.Filter().LabelSelector()
	if err != nil {
		return false, err
	}
	serviceCIDRs, err = servesServiceCIDRs(client)
	if err != nil {
		return false, err
	}
	const resync = 0 // a sync loop repairs on its own schedule
	proxied := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector.String() }))
	ownNode := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", st.NodeName()).String()
		}))
	cluster := informers.NewSharedInformerFactory(client, resync)

	handlers, err := addHandlers(st, opts, proxied, ownNode, cluster, serviceCIDRs)
	if err != nil {
		return false, err
	}
	factories := []informers.SharedInformerFactory{proxied, ownNode, cluster}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	timeout := cmp.Or(opts.SyncTimeout, DefaultSyncTimeout)
	syncCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(syncCtx.Done()) {
			if !ok {
				return false, fmt.Errorf("informer cache for %v did not sync within %v", typ, timeout)
			}
		}
	}
	// A full cache is not yet a full State: the handlers may still be
	// delivering the first lists' objects.
	delivered := make([]cache.InformerSynced, len(handlers))
	for i, h := range handlers {
		delivered[i] = h.HasSynced
	}
	if !cache.WaitForCacheSync(syncCtx.Done(), delivered...) {
		return false, fmt.Errorf("event handlers did not deliver the first lists within %v", timeout)
	}
	return serviceCIDRs, nil
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
