package servicemap

import (
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/affinity"
)

// PortName identifies one port of one Service: namespace, Service name, port
// name (empty for a Service's single unnamed port) and protocol. It is the key
// that ties a ServicePort to its endpoints.
type PortName struct {
	Namespace string
	Name      string
	Port      string
	Protocol  v1.Protocol
}

// String is kube-proxy's form "namespace/name:port", or "namespace/name" when
// the port has no name. The protocol is not part of it.
func (p PortName) String() string {
	if p.Port == "" {
		return p.Namespace + "/" + p.Name
	}
	return p.Namespace + "/" + p.Name + ":" + p.Port
}

// Compare orders PortNames by namespace, name, port name, then protocol.
func (p PortName) Compare(q PortName) int {
	switch {
	case p.Namespace != q.Namespace:
		return strings.Compare(p.Namespace, q.Namespace)
	case p.Name != q.Name:
		return strings.Compare(p.Name, q.Name)
	case p.Port != q.Port:
		return strings.Compare(p.Port, q.Port)
	}
	return strings.Compare(string(p.Protocol), string(q.Protocol))
}

// ServicePort is one port of one Service in one IP family, with everything a
// proxy needs to serve it. Values are immutable: the slices must not be
// modified by anyone holding a ServicePort.
type ServicePort struct {
	Name   PortName
	Family v1.IPFamily
	// ClusterIP is the Service's cluster IP of Family.
	ClusterIP netip.Addr
	// Port is the Service port; NodePort is 0 when the port has none.
	Port     uint16
	NodePort uint16
	// ExternalIPs and LoadBalancerIPs are the addresses of Family, sorted and
	// without duplicates. LoadBalancerIPs excludes ingress with ipMode Proxy.
	ExternalIPs     []netip.Addr
	LoadBalancerIPs []netip.Addr
	// LoadBalancerSourceRanges are the Service's source ranges of Family,
	// masked, sorted and without duplicates. Empty means no restriction.
	LoadBalancerSourceRanges []netip.Prefix
	// ExternalPolicyLocal is true when externalTrafficPolicy is Local and the
	// Service is externally accessible (NodePort, LoadBalancer, or
	// externalIPs).
	ExternalPolicyLocal bool
	// InternalPolicyLocal is true when internalTrafficPolicy is Local.
	InternalPolicyLocal bool
	// TrafficDistribution is spec.trafficDistribution as given ("" if unset).
	TrafficDistribution string
	Affinity            affinity.Policy
	// HealthCheckNodePort is set only for LoadBalancer Services with
	// externalTrafficPolicy Local.
	HealthCheckNodePort uint16
}

// ExternallyAccessible reports whether traffic can reach this port from
// outside the cluster network: through a NodePort, an externalIP or a
// load-balancer IP.
func (sp *ServicePort) ExternallyAccessible() bool {
	if sp == nil {
		return false
	}
	return sp.NodePort != 0 || len(sp.ExternalIPs) > 0 || len(sp.LoadBalancerIPs) > 0
}

// UsesClusterEndpoints reports whether some traffic to this port is spread
// over the endpoints of the whole cluster: internal traffic with
// internalTrafficPolicy Cluster, or any external traffic. Even with
// externalTrafficPolicy Local, traffic from pods and from the node itself to
// an external address is short-circuited to the cluster endpoints, as if it
// had gone out to the load balancer and come back.
func (sp *ServicePort) UsesClusterEndpoints() bool {
	if sp == nil {
		return false
	}
	return !sp.InternalPolicyLocal || sp.ExternallyAccessible()
}

// UsesLocalEndpoints reports whether some traffic to this port goes only to
// endpoints on the receiving node: internalTrafficPolicy Local, or
// externalTrafficPolicy Local on an externally accessible port.
func (sp *ServicePort) UsesLocalEndpoints() bool {
	if sp == nil {
		return false
	}
	return sp.InternalPolicyLocal || (sp.ExternalPolicyLocal && sp.ExternallyAccessible())
}

// Equal reports whether two ServicePorts are the same in every field.
func (sp *ServicePort) Equal(o *ServicePort) bool {
	if sp == nil || o == nil {
		return sp == o
	}
	return sp.Name == o.Name &&
		sp.Family == o.Family &&
		sp.ClusterIP == o.ClusterIP &&
		sp.Port == o.Port &&
		sp.NodePort == o.NodePort &&
		slices.Equal(sp.ExternalIPs, o.ExternalIPs) &&
		slices.Equal(sp.LoadBalancerIPs, o.LoadBalancerIPs) &&
		slices.Equal(sp.LoadBalancerSourceRanges, o.LoadBalancerSourceRanges) &&
		sp.ExternalPolicyLocal == o.ExternalPolicyLocal &&
		sp.InternalPolicyLocal == o.InternalPolicyLocal &&
		sp.TrafficDistribution == o.TrafficDistribution &&
		sp.Affinity == o.Affinity &&
		sp.HealthCheckNodePort == o.HealthCheckNodePort
}
