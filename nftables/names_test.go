package nftables_test

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/servicemap"
)

// refHash is kube-proxy's naming written plainly: the base32 SHA-256's first
// 8 characters, "-", the string, truncated to 240 characters with "...".
func refHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	name := base32.StdEncoding.EncodeToString(sum[:])[:8] + "-" + s
	if len(name) > 256-16 {
		name = name[:256-16-3] + "..."
	}
	return name
}

func refService(name servicemap.PortName) string {
	return name.Namespace + "/" + name.Name + "/" + strings.ToLower(string(name.Protocol)) + "/" + name.Port
}

// Property: the chain-name bases equal the plain construction, for names
// and addresses of any length (truncated ones included).
func TestPropChainBases(t *testing.T) {
	// Up to twice as long as DNS labels, so that some names are truncated.
	label := rapid.Custom(func(t *rapid.T) string {
		return rapid.StringMatching(`[a-z0-9-]{1,8}`).Draw(t, "label") + strings.Repeat("x", rapid.IntRange(0, 120).Draw(t, "padding"))
	})
	rapid.Check(t, func(t *rapid.T) {
		name := servicemap.PortName{
			Namespace: label.Draw(t, "namespace"),
			Name:      label.Draw(t, "name"),
			Port:      rapid.StringMatching(`[a-z0-9-]{0,15}`).Draw(t, "port"),
			Protocol:  rapid.SampledFrom([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}).Draw(t, "protocol"),
		}
		var raw [16]byte
		for i := range raw {
			raw[i] = byte(rapid.IntRange(0, 255).Draw(t, "byte"))
		}
		addr := netip.AddrFrom16(raw)
		if rapid.Bool().Draw(t, "v4") {
			addr = netip.AddrFrom4([4]byte(raw[:4]))
		}
		ep := netip.AddrPortFrom(addr, uint16(rapid.IntRange(0, 65535).Draw(t, "port")))
		if got, want := nftables.ServiceChainBase(name), refHash(refService(name)); got != want {
			t.Fatalf("ServiceChainBase(%v) = %q, want %q", name, got, want)
		}
		ip := strings.ReplaceAll(ep.Addr().String(), ":", ".")
		want := refHash(refService(name) + "__" + ip + "/" + strconv.Itoa(int(ep.Port())))
		if got := nftables.EndpointChainBase(name, ep); got != want {
			t.Fatalf("EndpointChainBase(%v, %v) = %q, want %q", name, ep, got, want)
		}
	})
}
