package state

import (
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy"
)

// Objects is a complete set of a proxy's input objects, as a manifest file
// or a relist gives them. Nil entries are ignored.
type Objects struct {
	Services       []*v1.Service
	EndpointSlices []*discovery.EndpointSlice
	// Nodes may hold any Nodes: only the proxy's own is used.
	Nodes        []*v1.Node
	ServiceCIDRs []*networkingv1.ServiceCIDR
}

// Replace makes the State hold exactly objs: each object is recorded as by
// its Update method, and what the State held that objs does not is deleted.
// It returns the warnings of the objects, as their events would, and one
// about the proxy's Node when objs has none of its name (a node name that
// matches no Node: the node has no zone and no addresses).
func (s *State) Replace(objs Objects) []svcproxy.Warning {
	if !s.made() {
		return notMade("State", "", "")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var warnings []svcproxy.Warning

	services := map[types.NamespacedName]bool{}
	for _, svc := range objs.Services {
		if svc != nil {
			warnings = append(warnings, s.updateService(svc)...)
			services[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = true
		}
	}
	for key := range s.knownServices {
		if !services[key] {
			s.deleteService(key)
		}
	}

	slices := map[types.NamespacedName]bool{}
	for _, es := range objs.EndpointSlices {
		if es != nil {
			warnings = append(warnings, s.updateSlice(es)...)
			slices[types.NamespacedName{Namespace: es.Namespace, Name: es.Name}] = true
		}
	}
	for key := range s.knownSlices {
		if !slices[key] {
			s.deleteSlice(key)
		}
	}

	warnings = append(warnings, s.replaceServiceCIDRs(objs.ServiceCIDRs)...)
	var node *v1.Node
	for _, n := range objs.Nodes {
		if n != nil && n.Name == s.nodeName {
			node = n
		}
	}
	var missing []svcproxy.Warning
	if node == nil {
		missing = []svcproxy.Warning{{Kind: "Node", Name: s.nodeName,
			Reason: "no Node of this name among the objects: the node has no zone and no addresses"}}
	}
	return append(warnings, s.recordNode(node, missing...)...)
}

func (s *State) replaceServiceCIDRs(cidrs []*networkingv1.ServiceCIDR) []svcproxy.Warning {
	var warnings []svcproxy.Warning
	names := map[string]bool{}
	for _, sc := range cidrs {
		if sc != nil {
			warnings = append(warnings, s.updateServiceCIDR(sc)...)
			names[sc.Name] = true
		}
	}
	for name := range s.serviceCIDRs {
		if !names[name] {
			s.deleteServiceCIDR(name)
		}
	}
	return warnings
}
