package ruleset

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/topology"
)

// DefaultMasqueradeMark is kube-proxy's default masquerade mark: bit 14.
const DefaultMasqueradeMark = 1 << 14

// Config is what a Builder needs to know beyond the Services and endpoints.
type Config struct {
	// Family is the IP family of the Ruleset: v1.IPv4Protocol or
	// v1.IPv6Protocol.
	Family v1.IPFamily
	// Node is the node the rules are for: endpoints on it are local.
	Node topology.Node
	// ClusterCIDRs are the pod networks of Family. Traffic to a cluster IP
	// from outside them is masqueraded. When empty, only MasqueradeAll
	// masquerades cluster-IP traffic.
	ClusterCIDRs []netip.Prefix
	// ServiceCIDRs are the Service IP ranges of Family (the API server's
	// --service-cluster-ip-range, or its ServiceCIDR objects), if known.
	// New connections to an address in them that is no cluster IP are
	// dropped by backends that do so (kube-proxy's nftables mode); others
	// ignore them.
	ServiceCIDRs []netip.Prefix
	// MasqueradeAll masquerades all traffic to cluster IPs.
	MasqueradeAll bool
	// MasqueradeMark is the single-bit packet mark that flags traffic to be
	// masqueraded; 0 means DefaultMasqueradeMark.
	MasqueradeMark uint32
	// NodePortAddresses are the addresses of Family on which NodePorts are
	// served; empty means every local address. NewBuilder refuses an
	// address that is invalid, has a zone or is of another family: this is
	// configuration. NodeAddresses takes them from a Node object, skipping
	// the unusable ones with a warning instead.
	NodePortAddresses []netip.Addr
	// LocalhostNodePorts serves NodePorts on 127.0.0.0/8 too (IPv4 only;
	// kube-proxy's iptables default is on, its nftables default off).
	LocalhostNodePorts bool
	// RestrictExternalIPs serves only the externalIPs inside
	// AllowedExternalIPs; other externalIPs are dropped with a warning.
	// Anyone who may create a Service may set externalIPs, and so capture
	// traffic to any address: a proxy for an untrusted cluster restricts
	// them.
	RestrictExternalIPs bool
	AllowedExternalIPs  []netip.Prefix
	// ComputeHints makes the Builder compute topology hints from each
	// Service's trafficDistribution, as the EndpointSlice controller would,
	// for proxies fed from files rather than from that controller. Hints
	// already in the EndpointSlices are replaced.
	ComputeHints bool
}

// ErrConfig is wrapped by every error about an invalid Config: a
// configuration error, which retrying with the same Config does not cure.
var ErrConfig = errors.New("ruleset config")

// Mark is the masquerade mark in effect.
func (c *Config) Mark() uint32 {
	if c == nil || c.MasqueradeMark == 0 {
		return DefaultMasqueradeMark
	}
	return c.MasqueradeMark
}

// Validate reports the first thing wrong with c (a nil Config has no
// Family), as an error that wraps ErrConfig.
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

func (c *Config) validate() error {
	if c == nil {
		return errors.New("no Config")
	}
	if c.Family != v1.IPv4Protocol && c.Family != v1.IPv6Protocol {
		return fmt.Errorf("unknown IP family %q", c.Family)
	}
	if c.MasqueradeMark != 0 && bits.OnesCount32(c.MasqueradeMark) != 1 {
		return fmt.Errorf("masquerade mark %#x is not a single bit", c.MasqueradeMark)
	}
	for _, p := range c.ClusterCIDRs {
		if err := c.checkPrefix("cluster CIDR", p); err != nil {
			return err
		}
	}
	for _, p := range c.AllowedExternalIPs {
		if err := c.checkPrefix("allowed externalIPs CIDR", p); err != nil {
			return err
		}
	}
	for _, p := range c.ServiceCIDRs {
		if err := c.checkPrefix("Service CIDR", p); err != nil {
			return err
		}
	}
	for _, a := range c.NodePortAddresses {
		if !a.IsValid() || a.Is4() != c.is4() || a.Zone() != "" {
			return fmt.Errorf("NodePort address %v is not a valid %s address", a, c.Family)
		}
	}
	return nil
}

func (c *Config) checkPrefix(what string, p netip.Prefix) error {
	if !p.IsValid() || p.Addr().Is4() != c.is4() || p.Addr().Zone() != "" {
		return fmt.Errorf("%s %v is not a valid %s prefix", what, p, c.Family)
	}
	return nil
}

func (c *Config) is4() bool { return c.Family == v1.IPv4Protocol }
