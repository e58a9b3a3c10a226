package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDemoManifests(t *testing.T) {
	var out, errs bytes.Buffer
	if err := run(&out, &errs, options{path: "manifests", nodeName: "node-a"}); err != nil {
		t.Fatal(err)
	}
	if errs.Len() != 0 {
		t.Errorf("demo manifests gave warnings:\n%s", errs.String())
	}
	for _, want := range []string{
		// The terminating endpoint 198.18.1.13 is not used while two are ready.
		"demo/web:http/tcp  cluster IP 198.19.0.10:80\n  cluster IP traffic: spread over 198.18.1.11:8080, 198.18.2.12:8080 (1/2 each)\n",
		"demo/dns:dns/udp  cluster IP 198.19.0.53:53\n  cluster IP traffic: spread over this node's 198.18.1.21:53\n",
		"external traffic:   spread over this node's 198.18.1.31:8080",
		"demo/empty:http/tcp  cluster IP 198.19.0.40:80\n  cluster IP traffic: rejected (no endpoints anywhere)\n",
		"health check node port 30256 answers 503 (no local endpoints)",
		"affinity ClientIP(600s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q; got:\n%s", want, out.String())
		}
	}
}

func TestBadManifestsFile(t *testing.T) {
	dir := t.TempDir()
	bad := "apiVersion: v1\nkind: Service\nmetadata: {namespace: demo, name: web}\nspec:\n  ports: [{port: eighty}]\n"
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	err := run(&out, &errs, options{path: dir, nodeName: "node-a"})
	if err == nil {
		t.Fatal("no error for a Service whose port is not a number")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "bad manifests: services.yaml: document 1: Service demo/web: ") || strings.Contains(msg, "\n") {
		t.Errorf("error %q does not name file and object on one line", msg)
	}
	if out.Len() != 0 {
		t.Errorf("printed a selection from a broken input:\n%s", out.String())
	}
}

func TestExplain(t *testing.T) {
	tests := []struct {
		clusterCIDR, packet string
		want                []string
	}{
		{"198.18.1.0/24", "tcp 198.18.1.50:40000 -> 198.19.0.10:80 from pod", []string{
			"forwarded through the cluster IP of demo/web:http\n",
			"iptables: KUBE-SERVICES -> KUBE-SVC-XRY76EGRC3BSCIIJ; nftables: service-AXK6CI2C-demo/web/tcp/http\n",
			"-> 198.18.1.11:8080, share 1/2 (iptables KUBE-SEP-Y3DDE2PFL35OXC4K, nftables endpoint-GI2M7EXI-demo/web/tcp/http__198.18.1.11/8080)\n",
		}},
		{"", "tcp 203.0.113.9:40000 -> 198.18.0.1:30080", []string{
			"forwarded through the node port of demo/shop:http\n",
			"iptables: KUBE-SERVICES -> KUBE-NODEPORTS -> KUBE-EXT-6EH4WSJZHKFFT4HP",
			"-> 198.18.1.31:8080, share 1 (",
		}},
		{"", "tcp 198.18.0.1:40000 -> 198.18.0.1:30080 from node", []string{
			"-> 198.18.2.33:8080, share 1/3, masqueraded (",
			"short-circuited to every endpoint",
		}},
		{"", "tcp 198.18.1.50:40000 -> 198.19.0.40:80", []string{"rejected through the cluster IP of demo/empty:http\n"}},
		{"", "udp 198.18.1.50:40000 -> 198.19.0.10:80", []string{"  not a Service\n"}},
	}
	for _, tt := range tests {
		var out, errs bytes.Buffer
		if err := run(&out, &errs, options{path: "manifests", nodeName: "node-a", clusterCIDR: tt.clusterCIDR, explain: tt.packet}); err != nil {
			t.Fatalf("%s: %v", tt.packet, err)
		}
		for _, want := range tt.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s: output lacks %q; got:\n%s", tt.packet, want, out.String())
			}
		}
	}
}
