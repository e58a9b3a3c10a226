package iptrace_test

import (
	"fmt"

	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/iptrace"
)

// Where does a pod's connection to a cluster IP go, by the rules alone? The
// rules are a small rendered rule set, with the jumps from the built-in
// chains that the Executor adds.
func ExampleRules_Evaluate() {
	rules, err := iptrace.Parse([]byte(`*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-XRY76EGRC3BSCIIJ - [0:0]
:KUBE-SEP-Y3DDE2PFL35OXC4K - [0:0]
:KUBE-SEP-3RCI2EW5533LCIO4 - [0:0]
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-SERVICES -m comment --comment "demo/web:http cluster IP" -m tcp -p tcp -d 198.19.0.10 --dport 80 -j KUBE-SVC-XRY76EGRC3BSCIIJ
-A KUBE-SVC-XRY76EGRC3BSCIIJ -m comment --comment "demo/web:http cluster IP" -m tcp -p tcp -d 198.19.0.10 --dport 80 ! -s 198.18.64.0/18 -j KUBE-MARK-MASQ
-A KUBE-SVC-XRY76EGRC3BSCIIJ -m comment --comment "demo/web:http -> 198.18.64.11:8080" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-Y3DDE2PFL35OXC4K
-A KUBE-SVC-XRY76EGRC3BSCIIJ -m comment --comment "demo/web:http -> 198.18.65.12:8080" -j KUBE-SEP-3RCI2EW5533LCIO4
-A KUBE-SEP-Y3DDE2PFL35OXC4K -m comment --comment demo/web:http -s 198.18.64.11 -j KUBE-MARK-MASQ
-A KUBE-SEP-Y3DDE2PFL35OXC4K -m comment --comment demo/web:http -m tcp -p tcp -j DNAT --to-destination 198.18.64.11:8080
-A KUBE-SEP-3RCI2EW5533LCIO4 -m comment --comment demo/web:http -s 198.18.65.12 -j KUBE-MARK-MASQ
-A KUBE-SEP-3RCI2EW5533LCIO4 -m comment --comment demo/web:http -m tcp -p tcp -j DNAT --to-destination 198.18.65.12:8080
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
COMMIT
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range []string{
		"tcp 198.18.64.7:40000 -> 198.19.0.10:80 from pod",
		"tcp 198.18.64.11:40000 -> 198.19.0.10:80 from pod",
		"tcp 198.18.0.1:40000 -> 198.19.0.10:80 from node",
		"tcp 198.18.64.7:40000 -> 198.19.0.10:443 from pod",
	} {
		p, _ := trace.ParsePacket(s)
		o, _, err := rules.Evaluate(p)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %s", s, o.Verdict)
		for _, c := range o.Targets {
			fmt.Printf(" %v (%s)", c.Endpoint, c.Share.FloatString(2))
			if c.Masquerade {
				fmt.Print(" masqueraded")
			}
		}
		fmt.Println()
	}
	// Output:
	// tcp 198.18.64.7:40000 -> 198.19.0.10:80 from pod: forwarded 198.18.64.11:8080 (0.50) 198.18.65.12:8080 (0.50)
	// tcp 198.18.64.11:40000 -> 198.19.0.10:80 from pod: forwarded 198.18.64.11:8080 (0.50) masqueraded 198.18.65.12:8080 (0.50)
	// tcp 198.18.0.1:40000 -> 198.19.0.10:80 from node: forwarded 198.18.64.11:8080 (0.50) masqueraded 198.18.65.12:8080 (0.50) masqueraded
	// tcp 198.18.64.7:40000 -> 198.19.0.10:443 from pod: not a Service
}
