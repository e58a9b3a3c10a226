package proxy

import (
	"net/netip"
	"slices"
	"sync"

	networkingv1 "k8s.io/api/networking/v1"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// State holds the change trackers of every IP family the proxy serves and
// the proxy's node: its zone and its addresses of those families. Sources
// write to it; the sync loop takes snapshots. It is safe for concurrent use.
type State struct {
	mu       sync.Mutex
	nodeName string
	families []v1.IPFamily
	node     topology.Node
	// nodeAddrs are the usable addresses of the node, from nodeAddrsFrom,
	// the Node's addresses as last recorded.
	nodeAddrs     []netip.Addr
	nodeAddrsFrom []v1.NodeAddress
	services      map[v1.IPFamily]*servicemap.Tracker
	slices        map[v1.IPFamily]*endpoints.Tracker
	// known is what the last Replace saw, to turn a new full set of objects
	// into deletes.
	knownServices, knownSlices map[types.NamespacedName]bool
	// triggerTimes holds, per EndpointSlice, the last-change-trigger-time
	// annotation not yet programmed.
	triggerTimes map[types.NamespacedName]string
	// serviceCIDRs holds the CIDRs of each ServiceCIDR object, by name.
	serviceCIDRs map[string][]netip.Prefix
}

// NewState returns an empty State for the given families and node.
func NewState(families []v1.IPFamily, nodeName string, filter servicemap.Filter) *State {
	s := &State{
		nodeName:      nodeName,
		families:      slices.Clone(families),
		node:          topology.Node{Name: nodeName},
		services:      map[v1.IPFamily]*servicemap.Tracker{},
		slices:        map[v1.IPFamily]*endpoints.Tracker{},
		knownServices: map[types.NamespacedName]bool{},
		knownSlices:   map[types.NamespacedName]bool{},
		triggerTimes:  map[types.NamespacedName]string{},
	}
	for _, f := range families {
		s.services[f] = servicemap.NewTracker(f, filter)
		s.slices[f] = endpoints.NewTracker(f, filter)
	}
	return s
}

// UpdateService records an added or changed Service.
func (s *State) UpdateService(svc *v1.Service) []svcproxy.Warning {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateService(svc)
}

func (s *State) updateService(svc *v1.Service) []svcproxy.Warning {
	var warnings []svcproxy.Warning
	for _, t := range s.services {
		_, w := t.Update(svc)
		warnings = appendNew(warnings, w)
	}
	return warnings
}

// DeleteService records a deleted Service.
func (s *State) DeleteService(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.services {
		t.Delete(namespace, name)
	}
}

// UpdateSlice records an added or changed EndpointSlice.
func (s *State) UpdateSlice(es *discovery.EndpointSlice) []svcproxy.Warning {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateSlice(es)
}

func (s *State) updateSlice(es *discovery.EndpointSlice) []svcproxy.Warning {
	var warnings []svcproxy.Warning
	for _, t := range s.slices {
		_, w := t.Update(es)
		warnings = appendNew(warnings, w)
	}
	if at, ok := es.Annotations[v1.EndpointsLastChangeTriggerTime]; ok {
		s.triggerTimes[types.NamespacedName{Namespace: es.Namespace, Name: es.Name}] = at
	}
	return warnings
}

// DeleteSlice records a deleted EndpointSlice.
func (s *State) DeleteSlice(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.slices {
		t.Delete(namespace, name)
	}
}

// UpdateNode records the proxy's own Node; other nodes are ignored. It
// warns about the Node's addresses that cannot serve NodePorts (see
// ruleset.NodeAddresses) when they changed since the Node was last recorded.
func (s *State) UpdateNode(n *v1.Node) []svcproxy.Warning {
	if n == nil || n.Name != s.nodeName {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recordNode(n)
}

// recordNode records the proxy's Node, or its absence when n is nil.
func (s *State) recordNode(n *v1.Node) []svcproxy.Warning {
	s.node = topology.Node{Name: s.nodeName}
	var addresses []v1.NodeAddress
	if n != nil {
		s.node = topology.NodeFromObject(n)
		addresses = n.Status.Addresses
	}
	if slices.Equal(addresses, s.nodeAddrsFrom) {
		return nil
	}
	s.nodeAddrsFrom = slices.Clone(addresses)
	var warnings []svcproxy.Warning
	s.nodeAddrs, warnings = ruleset.NodeAddresses(n, s.families...)
	return warnings
}

// Replace makes the State hold exactly the given objects: what is new or
// changed is updated, what is gone is deleted.
func (s *State) Replace(services []*v1.Service, slices []*discovery.EndpointSlice, nodes []*v1.Node) []svcproxy.Warning {
	s.mu.Lock()
	defer s.mu.Unlock()
	var warnings []svcproxy.Warning
	s.knownServices = replace(s.knownServices, services, func(svc *v1.Service) {
		warnings = append(warnings, s.updateService(svc)...)
	}, func(key types.NamespacedName) {
		for _, t := range s.services {
			t.Delete(key.Namespace, key.Name)
		}
	})
	s.knownSlices = replace(s.knownSlices, slices, func(es *discovery.EndpointSlice) {
		warnings = append(warnings, s.updateSlice(es)...)
	}, func(key types.NamespacedName) {
		for _, t := range s.slices {
			t.Delete(key.Namespace, key.Name)
		}
	})

	var node *v1.Node
	for _, n := range nodes {
		if n.Name == s.nodeName {
			node = n
		}
	}
	return append(warnings, s.recordNode(node)...)
}

// replace updates every object of objs and deletes every key of known that
// objs no longer hold; it returns the keys of objs.
func replace[T metav1.Object](known map[types.NamespacedName]bool, objs []T, update func(T), del func(types.NamespacedName)) map[types.NamespacedName]bool {
	seen := make(map[types.NamespacedName]bool, len(objs))
	for _, o := range objs {
		update(o)
		seen[types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}] = true
	}
	for key := range known {
		if !seen[key] {
			del(key)
		}
	}
	return seen
}

// snapshot is what one sync works from.
type snapshot struct {
	node topology.Node
	// nodeAddrs are the node's addresses of the families served, from its
	// Node object; nil when it has none.
	nodeAddrs    []netip.Addr
	families     map[v1.IPFamily]familySnapshot
	triggerTimes []string
	// serviceCIDRs are the CIDRs of every ServiceCIDR object, sorted, each
	// once.
	serviceCIDRs []netip.Prefix
}

type familySnapshot struct {
	services  servicemap.Snapshot
	endpoints endpoints.Snapshot
}

// Pending reports the Services and Services-with-changed-slices not yet
// synced.
func (s *State) Pending() (services, endpoints int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.services {
		services = max(services, t.Pending())
	}
	for _, t := range s.slices {
		endpoints = max(endpoints, t.Pending())
	}
	return services, endpoints
}

func (s *State) snapshot() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := snapshot{node: s.node, nodeAddrs: s.nodeAddrs, families: map[v1.IPFamily]familySnapshot{}}
	for f := range s.services {
		var fs familySnapshot
		fs.services, _ = s.services[f].Snapshot()
		fs.endpoints, _ = s.slices[f].Snapshot()
		snap.families[f] = fs
	}
	for key, at := range s.triggerTimes {
		snap.triggerTimes = append(snap.triggerTimes, at)
		delete(s.triggerTimes, key)
	}
	for _, cidrs := range s.serviceCIDRs {
		snap.serviceCIDRs = append(snap.serviceCIDRs, cidrs...)
	}
	slices.SortFunc(snap.serviceCIDRs, netip.Prefix.Compare)
	snap.serviceCIDRs = slices.Compact(snap.serviceCIDRs)
	return snap
}

// UpdateServiceCIDR records the CIDRs of a networking.k8s.io/v1 ServiceCIDR
// object: the cluster's Service ranges, whose unallocated addresses the
// nftables backend drops. A CIDR that does not parse is skipped with a
// warning.
func (s *State) UpdateServiceCIDR(sc *networkingv1.ServiceCIDR) []svcproxy.Warning {
	if sc == nil {
		return nil
	}
	report := svcproxy.Reporter{Kind: "ServiceCIDR", Name: sc.Name}
	var cidrs []netip.Prefix
	for _, c := range sc.Spec.CIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Addr().Zone() != "" {
			report.Warnf("CIDR %q is not a prefix: skipped", c)
			continue
		}
		cidrs = append(cidrs, p.Masked())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serviceCIDRs == nil {
		s.serviceCIDRs = map[string][]netip.Prefix{}
	}
	s.serviceCIDRs[sc.Name] = cidrs
	return report.Warnings
}

// DeleteServiceCIDR records that the ServiceCIDR object name is gone.
func (s *State) DeleteServiceCIDR(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.serviceCIDRs, name)
}

// appendNew appends the warnings of w not already in warnings: a
// dual-stack proxy converts each object once per family, and the warnings
// about the object itself are the same.
func appendNew(warnings, w []svcproxy.Warning) []svcproxy.Warning {
	for _, x := range w {
		dup := false
		for _, y := range warnings {
			if x == y {
				dup = true
				break
			}
		}
		if !dup {
			warnings = append(warnings, x)
		}
	}
	return warnings
}
