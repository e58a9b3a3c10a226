package servicemap

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

const (
	// LabelServiceProxyName is the label that hands a Service (and its
	// EndpointSlices) to a proxy other than the default one.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless marks the EndpointSlices (and Services) of headless
	// Services, which no proxy serves.
	LabelHeadless = "service.kubernetes.io/headless"
)

// Filter selects the objects that a proxy serves by their labels, as
// kube-proxy's informers do. The zero Filter takes only objects without a
// service-proxy-name label, like kube-proxy.
type Filter struct {
	// ProxyName, when set, takes only objects whose service-proxy-name label
	// equals it, so that a CNI's own proxy can serve Services that
	// kube-proxy leaves alone.
	ProxyName string
}

// Selects reports whether an object with these labels is meant for this
// proxy, and when it is not, why.
func (f Filter) Selects(labels map[string]string) (bool, string) {
	if _, headless := labels[LabelHeadless]; headless {
		return false, "labelled " + LabelHeadless
	}
	name, labelled := labels[LabelServiceProxyName]
	switch {
	case f.ProxyName == "" && labelled:
		return false, "labelled " + LabelServiceProxyName + " for another proxy"
	case f.ProxyName != "" && name != f.ProxyName:
		return false, "not labelled " + LabelServiceProxyName + "=" + f.ProxyName
	}
	return true, ""
}

// LabelSelector is the label selector that matches exactly the label sets
// Selects takes, for an API server to filter Services and EndpointSlices
// (its String is what a list or watch request sends). Without a ProxyName
// it is
//
//	!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name
//
// and with ProxyName NAME
//
//	!service.kubernetes.io/headless,service.kubernetes.io/service-proxy-name=NAME
//
// It fails when ProxyName is not a valid label value, which no object can
// carry.
func (f Filter) LabelSelector() (labels.Selector, error) {
	noHeadless, err := labels.NewRequirement(LabelHeadless, selection.DoesNotExist, nil)
	if err != nil {
		return nil, fmt.Errorf("label selector: %w", err)
	}
	proxyName, err := labels.NewRequirement(LabelServiceProxyName, selection.DoesNotExist, nil)
	if f.ProxyName != "" {
		proxyName, err = labels.NewRequirement(LabelServiceProxyName, selection.Equals, []string{f.ProxyName})
	}
	if err != nil {
		return nil, fmt.Errorf("label selector for proxy name %q: %w", f.ProxyName, err)
	}
	return labels.NewSelector().Add(*noHeadless, *proxyName), nil
}
