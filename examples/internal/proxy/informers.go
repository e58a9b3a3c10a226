package proxy

import (
	"context"
	"fmt"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/servicemap"
)

// clientFromKubeconfig makes a clientset from a kubeconfig file.
func clientFromKubeconfig(path string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	cfg.UserAgent = "svcproxy-reference-proxy"
	return kubernetes.NewForConfig(cfg)
}

// watchAPI feeds state from informers on client: Services and
// EndpointSlices without the service-proxy-name and headless labels (as
// kube-proxy selects them), and this node's Node. Every change asks onChange
// for a sync; warnings go to warn. It returns once the caches have synced,
// and the informers run until ctx is done.
func watchAPI(ctx context.Context, client kubernetes.Interface, state *State, nodeName string, onChange func(), warn func([]svcproxy.Warning)) error {
	noProxyName, err := labels.NewRequirement(servicemap.LabelServiceProxyName, selection.DoesNotExist, nil)
	if err != nil {
		return err
	}
	noHeadless, err := labels.NewRequirement(servicemap.LabelHeadless, selection.DoesNotExist, nil)
	if err != nil {
		return err
	}
	selector := labels.NewSelector().Add(*noProxyName, *noHeadless).String()
	const resync = 0 // the sync loop resyncs by itself
	factory := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	clusterFactory := informers.NewSharedInformerFactory(client, resync)
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", nodeName).String()
		}))

	handlers := eventHandlers(state, warn, factory, nodeFactory, clusterFactory)
	for _, h := range handlers {
		handler := h.handler
		wrapped := cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { handler.AddFunc(obj); onChange() },
			UpdateFunc: func(old, obj any) { handler.UpdateFunc(old, obj); onChange() },
			DeleteFunc: func(obj any) {
				if handler.DeleteFunc != nil {
					handler.DeleteFunc(obj)
				}
				onChange()
			},
		}
		if _, err := h.informer.AddEventHandler(wrapped); err != nil {
			return err
		}
	}
	factories := []informers.SharedInformerFactory{factory, nodeFactory, clusterFactory}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(syncCtx.Done()) {
			if !ok {
				return fmt.Errorf("informer cache for %v did not sync", typ)
			}
		}
	}
	return nil
}

// informerHandler is an informer and what its events do to the State.
type informerHandler struct {
	informer cache.SharedIndexInformer
	handler  cache.ResourceEventHandlerFuncs
}

// eventHandlers are the informers of Services, EndpointSlices (both from
// factory), this node's Node (nodeFactory) and ServiceCIDRs (clusterFactory),
// with what their events do to state; warnings go to warn.
func eventHandlers(state *State, warn func([]svcproxy.Warning), factory, nodeFactory, clusterFactory informers.SharedInformerFactory) []informerHandler {
	return []informerHandler{
		{factory.Core().V1().Services().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { onService(state, obj, warn) },
			UpdateFunc: func(_, obj any) { onService(state, obj, warn) },
			DeleteFunc: func(obj any) {
				if svc, ok := unwrap[*v1.Service](obj); ok {
					state.DeleteService(svc.Namespace, svc.Name)
				}
			},
		}},
		{factory.Discovery().V1().EndpointSlices().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { onSlice(state, obj, warn) },
			UpdateFunc: func(_, obj any) { onSlice(state, obj, warn) },
			DeleteFunc: func(obj any) {
				if es, ok := unwrap[*discovery.EndpointSlice](obj); ok {
					state.DeleteSlice(es.Namespace, es.Name)
				}
			},
		}},
		{nodeFactory.Core().V1().Nodes().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { onNode(state, obj, warn) },
			UpdateFunc: func(_, obj any) { onNode(state, obj, warn) },
		}},
		{clusterFactory.Networking().V1().ServiceCIDRs().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { onServiceCIDR(state, obj, warn) },
			UpdateFunc: func(_, obj any) { onServiceCIDR(state, obj, warn) },
			DeleteFunc: func(obj any) {
				if sc, ok := unwrap[*networkingv1.ServiceCIDR](obj); ok {
					state.DeleteServiceCIDR(sc.Name)
				}
			},
		}},
	}
}

func onService(state *State, obj any, warn func([]svcproxy.Warning)) {
	if svc, ok := obj.(*v1.Service); ok {
		warn(state.UpdateService(svc))
	}
}

func onSlice(state *State, obj any, warn func([]svcproxy.Warning)) {
	if es, ok := obj.(*discovery.EndpointSlice); ok {
		warn(state.UpdateSlice(es))
	}
}

func onNode(state *State, obj any, warn func([]svcproxy.Warning)) {
	if n, ok := obj.(*v1.Node); ok {
		warn(state.UpdateNode(n))
	}
}

func onServiceCIDR(state *State, obj any, warn func([]svcproxy.Warning)) {
	if sc, ok := obj.(*networkingv1.ServiceCIDR); ok {
		warn(state.UpdateServiceCIDR(sc))
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
