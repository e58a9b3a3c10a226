package nfttrace_test

import (
	"fmt"

	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/nfttrace"
)

// Where does a pod's connection to a cluster IP go, by the rules as nft
// lists them?
func ExampleTable_Evaluate() {
	table, err := nfttrace.Parse(`table ip kube-proxy {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 198.19.0.10 . tcp . 80 : goto service-AXK6CI2C-demo/web/tcp/http }
	}

	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr . meta l4proto . th dport vmap @service-ips
	}

	chain service-AXK6CI2C-demo/web/tcp/http {
		numgen random mod 2 vmap { 0 : goto endpoint-GI2M7EXI-demo/web/tcp/http__198.18.1.11/8080, 1 : goto endpoint-IANGHFLA-demo/web/tcp/http__198.18.2.12/8080 }
	}

	chain endpoint-GI2M7EXI-demo/web/tcp/http__198.18.1.11/8080 {
		meta l4proto tcp dnat to 198.18.1.11:8080
	}

	chain endpoint-IANGHFLA-demo/web/tcp/http__198.18.2.12/8080 {
		meta l4proto tcp dnat to 198.18.2.12:8080
	}
}
`)
	if err != nil {
		fmt.Println(err)
		return
	}
	p, _ := trace.ParsePacket("tcp 198.18.64.5:40000 -> 198.19.0.10:80 from pod")
	out, path, err := table.Evaluate(p)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.Verdict, out.Service, out.Kind)
	for _, c := range out.Targets {
		fmt.Println(" ", c.Endpoint, c.Share)
	}
	for _, s := range path {
		fmt.Println(s.Hook, s.Chain, s.Share)
	}
	// Output:
	// forwarded demo/web:http cluster IP
	//   198.18.1.11:8080 1/2
	//   198.18.2.12:8080 1/2
	// prerouting nat-prerouting <nil>
	// prerouting service-AXK6CI2C-demo/web/tcp/http 1/2
	// prerouting endpoint-GI2M7EXI-demo/web/tcp/http__198.18.1.11/8080 <nil>
	// prerouting service-AXK6CI2C-demo/web/tcp/http 1/2
	// prerouting endpoint-IANGHFLA-demo/web/tcp/http__198.18.2.12/8080 <nil>
}
