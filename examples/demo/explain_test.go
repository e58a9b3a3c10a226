package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
)

// TestExplainDesired: for a handful of packets on node-a of the demo
// manifests, each backend's desired rules, evaluated, give the outcome the
// tracer gives, and the output names the rules and elements that decide it.
func TestExplainDesired(t *testing.T) {
	tests := []struct {
		name, backend, packet string
		want                  []string
	}{
		{"cluster IP from a pod, iptables", "iptables", "tcp 198.18.1.50:40000 -> 198.19.0.10:80 from pod", []string{
			"iptables, desired rules:\n  forwarded through the cluster IP of demo/web:http\n  -> 198.18.1.11:8080, share 1/2\n  -> 198.18.2.12:8080, share 1/2\n  decided by:\n",
			"    nat PREROUTING: -A KUBE-SERVICES -m comment --comment \"demo/web:http cluster IP\" -m tcp -p tcp -d 198.19.0.10 --dport 80 -j KUBE-SVC-XRY76EGRC3BSCIIJ\n",
			"    nat PREROUTING (0.5000): -A KUBE-SEP-Y3DDE2PFL35OXC4K -m comment --comment demo/web:http -m tcp -p tcp -j DNAT --to-destination 198.18.1.11:8080\n",
			"  the tracer agrees\n",
		}},
		{"cluster IP from a pod, nftables", "nftables", "tcp 198.18.1.50:40000 -> 198.19.0.10:80 from pod", []string{
			"nftables, desired rules:\n  forwarded through the cluster IP of demo/web:http\n  -> 198.18.1.11:8080, share 1/2\n  -> 198.18.2.12:8080, share 1/2\n  decided by:\n",
			"    prerouting services: ip daddr . meta l4proto . th dport vmap @service-ips [service-ips 198.19.0.10 . tcp . 80 : goto service-AXK6CI2C-demo/web/tcp/http]\n",
			"    prerouting service-AXK6CI2C-demo/web/tcp/http: meta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 198.18.1.11 . 8080, 1 : 198.18.2.12 . 8080 } [ 1 : 198.18.2.12 . 8080] (share 1/2)\n",
			"  the tracer agrees\n",
		}},
		// The node's address is outside the cluster CIDR: its flows to a
		// cluster IP are masqueraded, as those from off the cluster are.
		{"cluster IP from the node, masqueraded", "nftables", "tcp 198.18.100.1:40000 -> 198.19.0.10:80 from node", []string{
			"  -> 198.18.1.11:8080, share 1/2, masqueraded\n",
			"ip daddr @cluster-ips ip saddr != 198.18.1.0/24 mark set mark or 0x00004000 comment \"masquerade clusterIP traffic from outside cluster\" [cluster-ips 198.19.0.10]\n",
			"  the tracer agrees\n",
		}},
		{"node port from outside, iptables", "iptables", "tcp 198.18.250.9:40000 -> 198.18.100.1:30080 from outside", []string{
			"  forwarded through the node port of demo/shop:http\n  -> 198.18.1.31:8080, share 1\n",
			"    nat PREROUTING: -A KUBE-NODEPORTS -m comment --comment demo/shop:http -m tcp -p tcp --dport 30080 -j KUBE-EXT-6EH4WSJZHKFFT4HP\n",
			"  the tracer agrees\n",
		}},
		{"node port from outside, nftables", "nftables", "tcp 198.18.250.9:40000 -> 198.18.100.1:30080 from outside", []string{
			"  forwarded through the node port of demo/shop:http\n  -> 198.18.1.31:8080, share 1\n",
			"[service-nodeports tcp . 30080 : goto external-HGPEBDKZ-demo/shop/tcp/http]\n",
			"  the tracer agrees\n",
		}},
		{"node port from the node, short-circuited", "nftables", "tcp 198.18.100.1:40000 -> 198.18.100.1:30080 from node", []string{
			"  -> 198.18.2.33:8080, share 1/3, masqueraded\n",
			"  short-circuited to every endpoint",
			"  the tracer agrees\n",
		}},
		{"eTP Local without local endpoints, iptables", "iptables", "tcp 198.18.250.9:40000 -> 198.18.100.1:30443", []string{
			"  dropped through the node port of demo/api:https\n  decided by:\n",
			"    filter INPUT: -A KUBE-EXTERNAL-SERVICES -m comment --comment \"demo/api:https has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30443 -j DROP\n",
			"  the tracer agrees\n",
		}},
		{"eTP Local without local endpoints, nftables", "nftables", "tcp 198.18.250.9:40000 -> 198.18.100.1:30443", []string{
			"  dropped through the node port of demo/api:https\n  decided by:\n",
			"[no-endpoint-nodeports tcp . 30443 comment \"demo/api:https\" : drop]\n",
			"  the tracer agrees\n",
		}},
		{"no endpoints, iptables", "iptables", "tcp 198.18.1.50:40000 -> 198.19.0.40:80 from pod", []string{
			"  rejected through the cluster IP of demo/empty:http\n",
			"    filter FORWARD: -A KUBE-SERVICES -m comment --comment \"demo/empty:http has no endpoints\" -m tcp -p tcp -d 198.19.0.40 --dport 80 -j REJECT\n",
			"  the tracer agrees\n",
		}},
		{"no endpoints, nftables", "nftables", "tcp 198.18.1.50:40000 -> 198.19.0.40:80 from pod", []string{
			"  rejected through the cluster IP of demo/empty:http\n",
			"    forward reject-chain: reject\n",
			"  the tracer agrees\n",
		}},
		{"source range refused, iptables", "iptables", "tcp 198.18.250.9:40000 -> 198.19.100.1:443", []string{
			"  dropped by the source-range firewall through the load-balancer IP of demo/api:https\n",
			"    filter FORWARD: -A KUBE-PROXY-FIREWALL -m comment --comment \"demo/api:https traffic not accepted by KUBE-FW-FPNDZPBCDEO3LHH3\" -m tcp -p tcp -d 198.19.100.1 --dport 443 -j DROP\n",
			"  the tracer agrees\n",
		}},
		{"source range refused, nftables", "nftables", "tcp 198.18.250.9:40000 -> 198.19.100.1:443", []string{
			"  dropped by the source-range firewall through the load-balancer IP of demo/api:https\n",
			"    prerouting firewall-JQ2F43TF-demo/api/tcp/https: ip saddr != { 198.18.200.0/24 } drop\n",
			"  the tracer agrees\n",
		}},
		{"affinity", "iptables", "tcp 198.18.1.50:40000 -> 198.19.0.30:80 from pod", []string{
			"  ClientIP affinity: a client that used an endpoint in the last 600 s gets it again\n",
			"  the tracer agrees\n",
		}},
		{"not a Service, iptables", "iptables", "udp 198.18.1.50:40000 -> 198.19.0.10:80", []string{
			"iptables, desired rules:\n  not a Service\n",
			"  the tracer agrees\n",
		}},
		{"unknown port of a cluster IP, nftables", "nftables", "udp 198.18.1.50:40000 -> 198.19.0.10:80", []string{
			"nftables, desired rules:\n  rejected\n",
			"    forward cluster-ips-check: ip daddr @cluster-ips reject comment \"Reject traffic to invalid ports of ClusterIPs\" [cluster-ips 198.19.0.10]\n",
			"  the tracer agrees\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			opts := options{path: "manifests", nodeName: "node-a", clusterCIDR: "198.18.1.0/24", explain: tt.packet, backend: tt.backend}
			if err := run(context.Background(), &out, &errs, opts); err != nil {
				t.Fatalf("%v\n%s", err, out.String())
			}
			if !strings.HasPrefix(out.String(), tt.packet[:strings.Index(tt.packet, " ->")]) {
				t.Errorf("output does not start with the packet:\n%s", out.String())
			}
			for _, want := range tt.want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q; got:\n%s", want, out.String())
				}
			}
			other := "nftables, "
			if tt.backend == "nftables" {
				other = "iptables, "
			}
			if strings.Contains(out.String(), other) {
				t.Errorf("--backend %s explained the other backend too:\n%s", tt.backend, out.String())
			}
		})
	}
}

// TestExplainBothBackends: without --backend both are explained, in order.
func TestExplainBothBackends(t *testing.T) {
	var out, errs bytes.Buffer
	opts := options{path: "manifests", nodeName: "node-a", explain: "tcp 198.18.1.50:40000 -> 198.19.0.10:80 from pod"}
	if err := run(context.Background(), &out, &errs, opts); err != nil {
		t.Fatal(err)
	}
	i, n := strings.Index(out.String(), "\niptables, desired rules:\n"), strings.Index(out.String(), "\nnftables, desired rules:\n")
	if i < 0 || n < i {
		t.Errorf("want iptables then nftables; got:\n%s", out.String())
	}
	if c := strings.Count(out.String(), "  the tracer agrees\n"); c != 2 {
		t.Errorf("%d backends agree with the tracer, want 2:\n%s", c, out.String())
	}
}

// TestExplainFlags: flags that make no sense are errors, not answers.
func TestExplainFlags(t *testing.T) {
	tests := []struct {
		name string
		opts options
		want string
	}{
		{"live without explain", options{live: true}, "--live and --backend need --explain"},
		{"unknown backend", options{explain: "tcp 198.18.1.50:40000 -> 198.19.0.10:80", backend: "ipvs"}, `--backend: unknown backend "ipvs"`},
		{"bad packet", options{explain: "tcp 198.18.1.50 -> 198.19.0.10:80"}, "--explain: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.path, tt.opts.nodeName = "manifests", "node-a"
			var out, errs bytes.Buffer
			err := run(context.Background(), &out, &errs, tt.opts)
			if err == nil || errors.Is(err, errDiffer) || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error %v, want one starting %q", err, tt.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed an answer:\n%s", out.String())
			}
		})
	}
}

// TestExplainDisagreement: a backend whose rules do not do what the
// tracer says is reported, and the answers differ.
func TestExplainDisagreement(t *testing.T) {
	rs, _, _, err := build(options{path: "manifests", nodeName: "node-a"}, v1.IPv4Protocol)
	if err != nil {
		t.Fatal(err)
	}
	dropsAll := func(*ruleset.Ruleset) (evaluator, error) {
		return func(trace.Packet) (trace.Outcome, []step, error) {
			return trace.Outcome{Verdict: ruleset.VerdictDrop}, []step{{where: "input", text: "input: drop"}}, nil
		}, nil
	}
	for _, b := range backends {
		b.desired = dropsAll
		p, err := trace.ParsePacket("tcp 198.18.1.50:40000 -> 198.19.0.10:80 from pod")
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err = explainer{rs: rs, backends: []backend{b}}.explain(context.Background(), &out, p)
		if !errors.Is(err, errDiffer) {
			t.Errorf("%s: error %v, want errDiffer", b.name, err)
		}
		for _, want := range []string{"  dropped\n  decided by:\n    input: drop\n", "  DIFFERS from the tracer: "} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: output lacks %q; got:\n%s", b.name, want, out.String())
			}
		}
	}
}
