package nftables

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/servicemap"
)

// DefaultTable is the name of kube-proxy's nftables table.
const DefaultTable = "kube-proxy"

// Names of the fixed objects in the table: kube-proxy's.
const (
	chainFilterPreroutingPre = "filter-prerouting-pre-dnat"
	chainFilterOutputPre     = "filter-output-pre-dnat"
	chainFilterInput         = "filter-input"
	chainFilterForward       = "filter-forward"
	chainFilterOutput        = "filter-output"
	chainNATPrerouting       = "nat-prerouting"
	chainNATOutput           = "nat-output"
	chainNATPostrouting      = "nat-postrouting"
	chainServices            = "services"
	chainServiceEPCheck      = "service-endpoints-check"
	chainNodePortEPCheck     = "nodeport-endpoints-check"
	chainClusterIPsCheck     = "cluster-ips-check"
	chainFirewallCheck       = "firewall-check"
	chainReject              = "reject-chain"
	chainMasquerading        = "masquerading"
	mapServiceIPs            = "service-ips"
	mapServiceNodePorts      = "service-nodeports"
	mapNoEndpointServices    = "no-endpoint-services"
	mapNoEndpointNodePorts   = "no-endpoint-nodeports"
	mapFirewallIPs           = "firewall-ips"
	setClusterIPs            = "cluster-ips"
	setNodePortIPs           = "nodeport-ips"
	setHairpin               = "hairpin-connections"
	prefixService            = "service-"
	prefixLocal              = "local-"
	prefixExternal           = "external-"
	prefixFirewall           = "firewall-"
	prefixEndpoint           = "endpoint-"
	prefixAffinity           = "affinity-"
	maxPrefixLen             = 16
	maxBaseLen               = knftables.NameLengthMax - maxPrefixLen
	endpointSeparator        = "__"
	truncatedSuffix          = "..."
	hashLen                  = 8
	defaultTableDescription  = "rules for kube-proxy"
)

// ServiceChainBase is the part of a ServicePort's chain names after the
// prefix ("service-", "local-", "external-", "firewall-"), as kube-proxy's
// nftables mode makes it: the first 8 characters of the base32 SHA-256 of
// "namespace/name/protocol/port", a dash, and that string, e.g.
// "ULMVA6XW-ns1/svc1/tcp/p80".
//
// The hash is not the iptables backend's, which hashes
// "namespace/name:port" + protocol for the iptables chain names.
func ServiceChainBase(name servicemap.PortName) string {
	var buf [128]byte
	return hashAndTruncate(appendServiceString(buf[:0], name))
}

// EndpointChainBase is the part of an endpoint's chain and affinity-set
// names after the prefix ("endpoint-", "affinity-"), as kube-proxy makes it:
// "HASH-namespace/name/protocol/port__IP/port", with the colons of an IPv6
// address written as dots, e.g. "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80".
func EndpointChainBase(name servicemap.PortName, endpoint netip.AddrPort) string {
	var buf [192]byte
	b := appendServiceString(buf[:0], name)
	b = append(b, endpointSeparator...)
	start := len(b)
	b = endpoint.Addr().AppendTo(b)
	for i := start; i < len(b); i++ {
		if b[i] == ':' {
			b[i] = '.'
		}
	}
	b = append(b, '/')
	b = strconv.AppendUint(b, uint64(endpoint.Port()), 10)
	return hashAndTruncate(b)
}

// appendServiceString appends "namespace/name/protocol/port" to b.
func appendServiceString(b []byte, name servicemap.PortName) []byte {
	b = append(b, name.Namespace...)
	b = append(b, '/')
	b = append(b, name.Name...)
	b = append(b, '/')
	for i := 0; i < len(name.Protocol); i++ {
		c := name.Protocol[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	b = append(b, '/')
	return append(b, name.Port...)
}

// hashAndTruncate prefixes s with its hash (the first hashLen characters of
// the base32 SHA-256) and truncates the result to maxBaseLen; the hash keeps
// truncated names unique.
func hashAndTruncate(s []byte) string {
	sum := sha256.Sum256(s)
	// hashLen base32 characters encode hashLen·5/8 bytes.
	var hash [hashLen]byte
	base32.StdEncoding.Encode(hash[:], sum[:hashLen*5/8])
	var name strings.Builder
	name.Grow(min(hashLen+1+len(s), maxBaseLen))
	name.Write(hash[:])
	name.WriteByte('-')
	if hashLen+1+len(s) > maxBaseLen {
		name.Write(s[:maxBaseLen-len(truncatedSuffix)-hashLen-1])
		name.WriteString(truncatedSuffix)
	} else {
		name.Write(s)
	}
	return name.String()
}

// serviceOfChain parses the ServicePort out of a per-service or per-endpoint
// chain name. It fails for the fixed chains (which hold no "/"), for
// truncated names and for names it does not recognise.
func serviceOfChain(chain string) (servicemap.PortName, bool) {
	var rest string
	found := false
	for _, p := range []string{prefixService, prefixLocal, prefixExternal, prefixFirewall, prefixEndpoint} {
		if r, ok := strings.CutPrefix(chain, p); ok {
			rest, found = r, true
			break
		}
	}
	if !found || strings.HasSuffix(chain, truncatedSuffix) || len(rest) < hashLen+1 || rest[hashLen] != '-' {
		return servicemap.PortName{}, false
	}
	rest = rest[hashLen+1:]
	if i := strings.Index(rest, endpointSeparator); i >= 0 {
		rest = rest[:i]
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 {
		return servicemap.PortName{}, false
	}
	var proto v1.Protocol
	switch parts[2] {
	case "tcp":
		proto = v1.ProtocolTCP
	case "udp":
		proto = v1.ProtocolUDP
	case "sctp":
		proto = v1.ProtocolSCTP
	default:
		return servicemap.PortName{}, false
	}
	return servicemap.PortName{Namespace: parts[0], Name: parts[1], Port: parts[3], Protocol: proto}, true
}
