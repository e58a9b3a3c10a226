package iptables

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/servicemap"
)

const (
	// DefaultPrefix is the chain prefix kube-proxy uses.
	DefaultPrefix = "KUBE"
	// MaxChainNameLen is the longest chain name iptables accepts
	// (XT_EXTENSION_MAXNAMELEN less the terminating NUL).
	MaxChainNameLen = 28
	// hashLen is how many base32 characters of a hash a per-Service or
	// per-endpoint chain name carries, as in kube-proxy.
	hashLen = 16
)

// Suffixes of the top-level chains, after the prefix and a dash.
const (
	sfxServices         = "SERVICES"
	sfxExternalServices = "EXTERNAL-SERVICES"
	sfxNodePorts        = "NODEPORTS"
	sfxPostrouting      = "POSTROUTING"
	sfxMarkMasq         = "MARK-MASQ"
	sfxForward          = "FORWARD"
	sfxProxyFirewall    = "PROXY-FIREWALL"
	sfxMasqNonPod       = "MASQ-NONPOD"
	sfxCanary           = "PROXY-CANARY"
	sfxFirewall         = "FIREWALL"
)

// Kinds of per-Service chains, after the prefix and a dash: cluster-policy
// (SVC), local-policy (SVL), external traffic (EXT), load-balancer source
// ranges (FW), one endpoint (SEP).
const (
	kindSVC = "SVC"
	kindSVL = "SVL"
	kindEXT = "EXT"
	kindFW  = "FW"
	kindSEP = "SEP"
)

// Names produces the names of every chain the package writes, from one
// prefix: with the default prefix "KUBE" they are kube-proxy's
// (KUBE-SERVICES, KUBE-SVC-<hash>, KUBE-SEP-<hash>, …), so the commands
// operators know keep working. A proxy that runs beside kube-proxy picks
// another prefix.
//
// The zero Names is DefaultNames. Names is a small comparable value.
type Names struct {
	prefix string
}

// DefaultNames returns kube-proxy's names.
func DefaultNames() Names { return Names{prefix: DefaultPrefix} }

// NewNames checks prefix and returns the Names made from it. A prefix is
// 1 to 7 characters from [A-Za-z0-9_], optionally split by single dashes,
// so that every chain name fits iptables' 28 characters
// (prefix-SVC-<16 characters of hash>). Prefixes that would produce chain
// names kube-proxy considers its own (KUBE-SVC…, KUBE-SEP…, …) are refused,
// except "KUBE" itself.
func NewNames(prefix string) (Names, error) {
	if err := validPrefix(prefix); err != nil {
		return Names{}, err
	}
	n := Names{prefix: prefix}
	for _, c := range n.TopLevel() {
		if len(c) > MaxChainNameLen {
			return Names{}, fmt.Errorf("chain prefix %q: chain name %q is longer than %d characters", prefix, c, MaxChainNameLen)
		}
	}
	if l := len(n.chain(kindSEP, strings.Repeat("A", hashLen))); l > MaxChainNameLen {
		return Names{}, fmt.Errorf("chain prefix %q: per-endpoint chain names would be %d characters, longer than %d", prefix, l, MaxChainNameLen)
	}
	return n, nil
}

func validPrefix(p string) error {
	if p == "" {
		return fmt.Errorf("empty chain prefix")
	}
	prevDash := true // no leading dash
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_':
			prevDash = false
		case c == '-' && !prevDash:
			prevDash = true
		default:
			return fmt.Errorf("chain prefix %q: only letters, digits, '_' and single inner '-' are allowed", p)
		}
	}
	if prevDash {
		return fmt.Errorf("chain prefix %q ends with '-'", p)
	}
	if p != DefaultPrefix {
		for _, k := range []string{kindSVC, kindSVL, kindEXT, kindFW, kindSEP} {
			if strings.HasPrefix(p+"-", DefaultPrefix+"-"+k) {
				return fmt.Errorf("chain prefix %q: kube-proxy would take chains named %s-… for its own", p, DefaultPrefix+"-"+k)
			}
		}
	}
	return nil
}

// Prefix is the chain prefix.
func (n Names) Prefix() string {
	if n.prefix == "" {
		return DefaultPrefix
	}
	return n.prefix
}

func (n Names) top(suffix string) string { return n.Prefix() + "-" + suffix }

func (n Names) chain(kind, hash string) string { return n.Prefix() + "-" + kind + "-" + hash[:hashLen] }

// Services is KUBE-SERVICES: in nat, the entry point from PREROUTING and
// OUTPUT that matches Service addresses; in filter, where cluster-IP traffic
// of Services without endpoints is rejected or dropped.
func (n Names) Services() string { return n.top(sfxServices) }

// ExternalServices is KUBE-EXTERNAL-SERVICES (filter): rejects or drops
// traffic to external IPs, load-balancer IPs and node ports that have no
// endpoint to go to.
func (n Names) ExternalServices() string { return n.top(sfxExternalServices) }

// NodePorts is KUBE-NODEPORTS: in nat, node-port traffic to each Service's
// external chain; in filter, health-check node ports accepted.
func (n Names) NodePorts() string { return n.top(sfxNodePorts) }

// Postrouting is KUBE-POSTROUTING (nat): masquerades marked traffic.
func (n Names) Postrouting() string { return n.top(sfxPostrouting) }

// MarkMasq is KUBE-MARK-MASQ (nat): sets the masquerade mark.
func (n Names) MarkMasq() string { return n.top(sfxMarkMasq) }

// Forward is KUBE-FORWARD (filter): accepts forwarded Service traffic.
func (n Names) Forward() string { return n.top(sfxForward) }

// ProxyFirewall is KUBE-PROXY-FIREWALL (filter): drops load-balancer
// traffic that the source-range firewall did not let through.
func (n Names) ProxyFirewall() string { return n.top(sfxProxyFirewall) }

// MasqNonPod is KUBE-MASQ-NONPOD (nat), used only with more than one cluster
// CIDR: it marks for masquerading the packets whose source is in none of
// them (one rule cannot say "in none of several prefixes").
func (n Names) MasqNonPod() string { return n.top(sfxMasqNonPod) }

// Canary is KUBE-PROXY-CANARY (filter, nat and mangle), kube-proxy's name
// for the empty chain whose disappearance tells it that a table was
// flushed or reloaded. The Executor writes it, empty, as kube-proxy's
// iptables mode does; Render does not.
func (n Names) Canary() string { return n.top(sfxCanary) }

// Firewall is KUBE-FIREWALL (filter), jumped to from INPUT and OUTPUT. With
// Config.LocalhostNodePorts (IPv4) it drops packets to 127.0.0.0/8 from
// elsewhere that no DNAT translated, as kube-proxy does ("block incoming
// localnet connections"): route_localnet, which localhost node ports need,
// would let them in. Otherwise it is empty.
func (n Names) Firewall() string { return n.top(sfxFirewall) }

// FilterChains are the top-level chains of the filter table, in the order
// they are declared.
func (n Names) FilterChains() []string {
	return []string{n.Services(), n.ExternalServices(), n.Forward(), n.NodePorts(), n.ProxyFirewall(), n.Firewall()}
}

// NATChains are the top-level chains of the nat table, in the order they are
// declared. MasqNonPod is among them, though it exists only with more than
// one cluster CIDR.
func (n Names) NATChains() []string {
	return []string{n.Services(), n.NodePorts(), n.Postrouting(), n.MarkMasq(), n.MasqNonPod()}
}

// TopLevel lists every top-level chain name, each once, the Canary among
// them.
func (n Names) TopLevel() []string {
	return []string{n.Services(), n.ExternalServices(), n.Forward(), n.NodePorts(), n.ProxyFirewall(), n.Firewall(), n.Postrouting(), n.MarkMasq(), n.MasqNonPod(), n.Canary()}
}

// ServiceChain is KUBE-SVC-<hash>: spreads traffic over the cluster targets.
func (n Names) ServiceChain(name servicemap.PortName) string {
	return n.chain(kindSVC, servicePortHash(name))
}

// LocalChain is KUBE-SVL-<hash>: spreads traffic over the node-local
// targets.
func (n Names) LocalChain(name servicemap.PortName) string {
	return n.chain(kindSVL, servicePortHash(name))
}

// ExternalChain is KUBE-EXT-<hash>: where traffic to node ports, external
// IPs and load-balancer IPs goes.
func (n Names) ExternalChain(name servicemap.PortName) string {
	return n.chain(kindEXT, servicePortHash(name))
}

// FirewallChain is KUBE-FW-<hash>: the load-balancer source-range firewall.
func (n Names) FirewallChain(name servicemap.PortName) string {
	return n.chain(kindFW, servicePortHash(name))
}

// EndpointChain is KUBE-SEP-<hash>: DNAT to one endpoint.
func (n Names) EndpointChain(name servicemap.PortName, endpoint netip.AddrPort) string {
	return n.chain(kindSEP, endpointHash(name, endpoint))
}

// Owns reports whether chain is a name these Names produce: a top-level
// chain, or a per-Service or per-endpoint chain (prefix, kind, 16 base32
// characters). Cleanup removes exactly the chains it owns.
func (n Names) Owns(chain string) bool {
	for _, c := range n.TopLevel() {
		if chain == c {
			return true
		}
	}
	return n.ownsServiceChain(chain)
}

// ownsServiceChain reports whether chain is one of the per-Service or
// per-endpoint chains these Names produce.
func (n Names) ownsServiceChain(chain string) bool {
	rest, ok := strings.CutPrefix(chain, n.Prefix()+"-")
	if !ok {
		return false
	}
	kind, hash, ok := strings.Cut(rest, "-")
	if !ok || len(hash) != hashLen {
		return false
	}
	switch kind {
	case kindSVC, kindSVL, kindEXT, kindFW, kindSEP:
	default:
		return false
	}
	for i := 0; i < len(hash); i++ {
		if c := hash[i]; !(c >= 'A' && c <= 'Z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}
