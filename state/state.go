package state

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// State holds the inputs of a proxy for the IP families it serves. Make one
// with New: a nil or zero State serves no family and records nothing (each
// Update returns a warning that says so), and its Snapshots are empty. All
// methods are safe for concurrent use.
type State struct {
	nodeName string
	filter   servicemap.Filter
	families []v1.IPFamily

	mu       sync.Mutex
	services map[v1.IPFamily]*servicemap.Tracker
	slices   map[v1.IPFamily]*endpoints.Tracker
	// node is the proxy's node, and nodeAddrs its usable addresses of the
	// families served, from its Node object (none without one).
	node      topology.Node
	nodeAddrs []netip.Addr
	// knownServices and knownSlices are the objects recorded and not
	// deleted, for Replace to turn a full set into deletes.
	knownServices, knownSlices map[types.NamespacedName]bool
	// triggerTimes holds, per EndpointSlice, the last-change-trigger-times
	// recorded since the last Snapshot, in the order recorded.
	triggerTimes map[types.NamespacedName][]time.Time
	// triggerFamily is, per EndpointSlice of triggerTimes, the IP family
	// of its addresses ("" for FQDN ones).
	triggerFamily map[types.NamespacedName]v1.IPFamily
	// lastTrigger holds, per EndpointSlice known, the last
	// last-change-trigger-time recorded: the same time again (a relist, a
	// manifest reload) is not a new change.
	lastTrigger map[types.NamespacedName]time.Time
	// serviceCIDRs holds the CIDRs of each ServiceCIDR object, by name.
	serviceCIDRs map[string][]netip.Prefix
	// reported holds, per object, the warnings its last event gave.
	reported map[objectKey][]svcproxy.Warning
}

// New returns an empty State for the families served (IPv4, IPv6 or both,
// each once), the node called nodeName, and the Services and EndpointSlices
// that filter selects.
func New(families []v1.IPFamily, nodeName string, filter servicemap.Filter) (*State, error) {
	if len(families) == 0 {
		return nil, fmt.Errorf("state: no IP family")
	}
	if _, err := filter.LabelSelector(); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	s := &State{
		nodeName:      nodeName,
		filter:        filter,
		node:          topology.Node{Name: nodeName},
		services:      map[v1.IPFamily]*servicemap.Tracker{},
		slices:        map[v1.IPFamily]*endpoints.Tracker{},
		knownServices: map[types.NamespacedName]bool{},
		knownSlices:   map[types.NamespacedName]bool{},
		triggerTimes:  map[types.NamespacedName][]time.Time{},
		triggerFamily: map[types.NamespacedName]v1.IPFamily{},
		lastTrigger:   map[types.NamespacedName]time.Time{},
		serviceCIDRs:  map[string][]netip.Prefix{},
		reported:      map[objectKey][]svcproxy.Warning{},
	}
	for _, f := range families {
		if f != v1.IPv4Protocol && f != v1.IPv6Protocol {
			return nil, fmt.Errorf("state: unknown IP family %q", f)
		}
		if s.services[f] != nil {
			return nil, fmt.Errorf("state: IP family %s given twice", f)
		}
		s.services[f] = servicemap.NewTracker(f, filter)
		s.slices[f] = endpoints.NewTracker(f, filter)
		s.families = append(s.families, f)
	}
	slices.Sort(s.families)
	return s, nil
}

// made reports whether New made s.
func (s *State) made() bool { return s != nil && s.services != nil }

// notMade is the warning of an Update on a State that New did not make.
func notMade(kind, namespace, name string) []svcproxy.Warning {
	return []svcproxy.Warning{{Kind: kind, Namespace: namespace, Name: name, Reason: "the State was not made by state.New: not recorded"}}
}

// Families are the IP families served, IPv4 first.
func (s *State) Families() []v1.IPFamily {
	if !s.made() {
		return nil
	}
	return slices.Clone(s.families)
}

// NodeName is the name of the proxy's node.
func (s *State) NodeName() string {
	if !s.made() {
		return ""
	}
	return s.nodeName
}

// Filter selects the Services and EndpointSlices the State keeps; a source
// may send its LabelSelector to the API server.
func (s *State) Filter() servicemap.Filter {
	if !s.made() {
		return servicemap.Filter{}
	}
	return s.filter
}

// UpdateService records an added or changed Service.
func (s *State) UpdateService(svc *v1.Service) []svcproxy.Warning {
	if svc == nil {
		return nil
	}
	if !s.made() {
		return notMade("Service", svc.Namespace, svc.Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateService(svc)
}

func (s *State) updateService(svc *v1.Service) []svcproxy.Warning {
	var warnings []svcproxy.Warning
	for _, f := range s.families {
		_, w := s.services[f].Update(svc)
		warnings = append(warnings, w...)
	}
	key := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	s.knownServices[key] = true
	return s.report(objectKey{"Service", key}, warnings)
}

// DeleteService records that the Service namespace/name is gone.
func (s *State) DeleteService(namespace, name string) {
	if !s.made() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteService(types.NamespacedName{Namespace: namespace, Name: name})
}

func (s *State) deleteService(key types.NamespacedName) {
	for _, f := range s.families {
		s.services[f].Delete(key.Namespace, key.Name)
	}
	delete(s.knownServices, key)
	s.report(objectKey{"Service", key}, nil)
}

// UpdateSlice records an added or changed EndpointSlice, and its
// last-change-trigger-time annotation (RFC 3339, with or without fractions
// of a second) when it has one that differs from the one it last had: each
// such time is handed out by the next Snapshot, as kube-proxy observes
// every change of a slice between two syncs, not only the last.
func (s *State) UpdateSlice(es *discovery.EndpointSlice) []svcproxy.Warning {
	if es == nil {
		return nil
	}
	if !s.made() {
		return notMade("EndpointSlice", es.Namespace, es.Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateSlice(es)
}

func (s *State) updateSlice(es *discovery.EndpointSlice) []svcproxy.Warning {
	var warnings []svcproxy.Warning
	for _, f := range s.families {
		_, w := s.slices[f].Update(es)
		warnings = append(warnings, w...)
	}
	key := types.NamespacedName{Namespace: es.Namespace, Name: es.Name}
	s.knownSlices[key] = true
	if at, ok := es.Annotations[v1.EndpointsLastChangeTriggerTime]; ok {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			warnings = append(warnings, svcproxy.Warning{Kind: "EndpointSlice", Namespace: es.Namespace, Name: es.Name,
				Reason: fmt.Sprintf("annotation %s %q is not an RFC 3339 time: ignored", v1.EndpointsLastChangeTriggerTime, at)})
		} else {
			s.recordTrigger(key, sliceFamily(es.AddressType), t)
		}
	}
	return s.report(objectKey{"EndpointSlice", key}, warnings)
}

// recordTrigger records the trigger time t of the slice key, whose
// addresses are of family, unless it is the one the slice last had.
func (s *State) recordTrigger(key types.NamespacedName, family v1.IPFamily, t time.Time) {
	if last, ok := s.lastTrigger[key]; ok && last.Equal(t) {
		return
	}
	s.lastTrigger[key] = t
	s.triggerTimes[key] = append(s.triggerTimes[key], t)
	s.triggerFamily[key] = family
}

// sliceFamily is the IP family of an EndpointSlice's addresses; "" for
// FQDN ones.
func sliceFamily(t discovery.AddressType) v1.IPFamily {
	switch t {
	case discovery.AddressTypeIPv4:
		return v1.IPv4Protocol
	case discovery.AddressTypeIPv6:
		return v1.IPv6Protocol
	}
	return ""
}

// DeleteSlice records that the EndpointSlice namespace/name is gone.
func (s *State) DeleteSlice(namespace, name string) {
	if !s.made() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteSlice(types.NamespacedName{Namespace: namespace, Name: name})
}

func (s *State) deleteSlice(key types.NamespacedName) {
	for _, f := range s.families {
		s.slices[f].Delete(key.Namespace, key.Name)
	}
	delete(s.knownSlices, key)
	// A deleted slice's trigger time is that of its last update, not of
	// the delete: kube-proxy does not observe it either.
	delete(s.triggerTimes, key)
	delete(s.triggerFamily, key)
	delete(s.lastTrigger, key)
	s.report(objectKey{"EndpointSlice", key}, nil)
}

// UpdateNode records the proxy's own Node: its zone (its
// topology.kubernetes.io/zone label) and its addresses of the families
// served (see ruleset.NodeAddresses, whose warnings it returns). Other
// Nodes are ignored.
func (s *State) UpdateNode(n *v1.Node) []svcproxy.Warning {
	if n == nil || !s.made() || n.Name != s.nodeName {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recordNode(n)
}

// DeleteNode records that the Node called name is gone: when it is the
// proxy's own, the node has no zone and no addresses until it comes back.
func (s *State) DeleteNode(name string) {
	if !s.made() || name != s.nodeName {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordNode(nil)
}

// recordNode records the proxy's Node, or its absence when n is nil, and
// reports the warnings about it, and those of extra.
func (s *State) recordNode(n *v1.Node, extra ...svcproxy.Warning) []svcproxy.Warning {
	s.node = topology.Node{Name: s.nodeName}
	if n != nil {
		s.node = topology.NodeFromObject(n)
	}
	var warnings []svcproxy.Warning
	s.nodeAddrs, warnings = ruleset.NodeAddresses(n, s.families...)
	warnings = append(warnings, extra...)
	return s.report(objectKey{"Node", types.NamespacedName{Name: s.nodeName}}, warnings)
}

// UpdateServiceCIDR records the CIDRs of a networking.k8s.io/v1
// ServiceCIDR object: Service ranges of the cluster. A CIDR that does not
// parse is skipped with a warning.
func (s *State) UpdateServiceCIDR(sc *networkingv1.ServiceCIDR) []svcproxy.Warning {
	if sc == nil {
		return nil
	}
	if !s.made() {
		return notMade("ServiceCIDR", "", sc.Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateServiceCIDR(sc)
}

func (s *State) updateServiceCIDR(sc *networkingv1.ServiceCIDR) []svcproxy.Warning {
	report := svcproxy.Reporter{Kind: "ServiceCIDR", Name: sc.Name}
	cidrs := []netip.Prefix{}
	for _, c := range sc.Spec.CIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Addr().Zone() != "" {
			report.Warnf("CIDR %q is not a prefix: skipped", c)
			continue
		}
		cidrs = append(cidrs, p.Masked())
	}
	s.serviceCIDRs[sc.Name] = cidrs
	return s.report(objectKey{"ServiceCIDR", types.NamespacedName{Name: sc.Name}}, report.Warnings)
}

// DeleteServiceCIDR records that the ServiceCIDR object name is gone.
func (s *State) DeleteServiceCIDR(name string) {
	if !s.made() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteServiceCIDR(name)
}

func (s *State) deleteServiceCIDR(name string) {
	delete(s.serviceCIDRs, name)
	s.report(objectKey{"ServiceCIDR", types.NamespacedName{Name: name}}, nil)
}

// Pending reports how many Services, and how many Services' endpoints,
// differ from the last Snapshot's, in the family where most do
// (kube-proxy's service_changes_pending and endpoint_changes_pending).
func (s *State) Pending() (services, endpoints int) {
	if !s.made() {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.families {
		services = max(services, s.services[f].Pending())
		endpoints = max(endpoints, s.slices[f].Pending())
	}
	return services, endpoints
}
