// Package names checks the Service port names that both nftables layouts
// put into chain names, element comments and warnings: a second line of
// defence behind servicemap's validation, so that nothing in a Service can
// inject text into an nft script.
package names

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// Safe reports whether a ServicePort's names can go into chain names
// and comments as they are: DNS labels and port names use [a-z0-9-] only.
// servicemap validates them; this is a second line of defence, so that
// nothing in a Service can ever inject text into the nft script.
func Safe(name servicemap.PortName) bool {
	switch name.Protocol {
	case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
	default:
		return false
	}
	return name.Namespace != "" && name.Name != "" &&
		nameChars(name.Namespace) && nameChars(name.Name) && nameChars(name.Port)
}

// nameChars reports whether s has only the bytes of nameByte.
func nameChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if !nameByte[s[i]] {
			return false
		}
	}
	return true
}

// nameByte marks the bytes that Safe lets through: [a-z0-9-].
var nameByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['-'] = true
	return t
}()

// UnsafeWarning names a Service port that is not rendered because its name
// is not usable in chain names.
func UnsafeWarning(s *ruleset.Service) svcproxy.Warning {
	return svcproxy.Warning{
		Kind: "Service", Namespace: s.Name.Namespace, Name: s.Name.Name,
		Reason: fmt.Sprintf("port %q/%s: name not usable in nftables chain names: not served", s.Name.Port, s.Name.Protocol),
	}
}
