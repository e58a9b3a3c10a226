package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strings"

	"github.com/svcproxy/svcproxy/servicemap"
)

// servicePortHash is the base32 SHA-256 of "namespace/name:port" followed by
// the lower-case protocol, kube-proxy's basis for a ServicePort's iptables
// chain names: KUBE-SVC-, KUBE-SVL-, KUBE-EXT- and KUBE-FW- use its first 16
// characters. (kube-proxy's nftables chains hash another string.)
func servicePortHash(name servicemap.PortName) string {
	return hash(name.String() + strings.ToLower(string(name.Protocol)))
}

// endpointHash is the base32 SHA-256 of "namespace/name:port", the
// lower-case protocol and the endpoint's "ip:port", kube-proxy's basis for
// the KUBE-SEP- chain names (their first 16 characters).
func endpointHash(name servicemap.PortName, endpoint netip.AddrPort) string {
	return hash(name.String() + strings.ToLower(string(name.Protocol)) + endpoint.String())
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(sum[:])
}
