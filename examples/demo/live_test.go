package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The files in testdata/live are what iptables-save (v1.8.9, nf_tables)
// and `nft list table ip kube-proxy` printed in TestKernelExplainLive's
// namespace after the executors synced the demo manifests for node-a
// with --cluster-cidr 198.18.1.0/24.

// foreignRules are rules of other programs in the filter table, with an
// interface match that the evaluator does not model: explain --live
// leaves them out.
const foreignRules = `:DOCKER-USER - [0:0]
-A FORWARD -j DOCKER-USER
-A INPUT -i lo -j ACCEPT
-A DOCKER-USER -i docker0 -j RETURN
`

// savedRules is a runFunc that answers iptables-save and nft list table
// with the files of testdata/live, each passed through edit: IPv6 has
// empty tables (ip6tables-save prints nothing) and no nftables table.
func savedRules(t *testing.T, edit func(file, text string) string) runFunc {
	files := map[string]string{
		"iptables-save -t filter":      "iptables-save-filter.txt",
		"iptables-save -t nat":         "iptables-save-nat.txt",
		"nft list table ip kube-proxy": "nft-list-table.txt",
		"ip6tables-save -t filter":     "",
		"ip6tables-save -t nat":        "",
	}
	return func(_ context.Context, name string, args ...string) (string, error) {
		cmd := strings.Join(append([]string{name}, args...), " ")
		file, ok := files[cmd]
		switch {
		case !ok:
			return "", fmt.Errorf("%s: exit status 1: Error: No such file or directory", cmd)
		case file == "":
			return "", nil
		}
		text, err := os.ReadFile(filepath.Join("testdata", "live", file))
		if err != nil {
			t.Fatal(err)
		}
		return edit(file, string(text)), nil
	}
}

// explainSaved explains packet from the live rules that read reads.
func explainSaved(t *testing.T, read runFunc, backend, packet string) (string, error) {
	t.Helper()
	opts := options{path: "manifests", nodeName: "node-a", clusterCIDR: "198.18.1.0/24", live: true, run: read, backend: backend, explain: packet}
	var out, errs bytes.Buffer
	err := run(context.Background(), &out, &errs, opts)
	if err != nil && !errors.Is(err, errDiffer) {
		t.Fatalf("%s: %s: %v", backend, packet, err)
	}
	return out.String(), err
}

// TestExplainLiveSaved: the kernel's rules as the tools print them agree
// with the desired ones for every packet, other programs' rules left out;
// without a Service's rule or element the difference is reported; without
// the rules at all (or without the nat chains) they are reported absent.
func TestExplainLiveSaved(t *testing.T) {
	withForeign := savedRules(t, func(file, text string) string {
		if file == "iptables-save-filter.txt" {
			return strings.Replace(text, "-A INPUT -j KUBE-FIREWALL\n", foreignRules+"-A INPUT -j KUBE-FIREWALL\n", 1)
		}
		return text
	})
	for _, b := range []string{"iptables", "nftables"} {
		for _, p := range livePackets {
			out, err := explainSaved(t, withForeign, b, p)
			if err != nil || !strings.Contains(out, "  live and desired rules agree\n") {
				t.Errorf("%s: %s: error %v, want agreement; got:\n%s", b, p, err, out)
			}
		}
	}

	withoutWeb := savedRules(t, func(_, text string) string {
		var kept []string
		for _, line := range strings.SplitAfter(text, "\n") {
			if !strings.HasPrefix(line, "-A KUBE-SERVICES -d 198.19.0.10/32 ") && !strings.Contains(line, "198.19.0.10 . tcp . 80 : goto") {
				kept = append(kept, line)
			}
		}
		return strings.Join(kept, "")
	})
	for _, tt := range []struct{ backend, live string }{
		{"iptables", "iptables, live rules (iptables-save):\n  not a Service\n"},
		{"nftables", "nftables, live rules (nft list table ip kube-proxy):\n  rejected\n"},
	} {
		out, err := explainSaved(t, withoutWeb, tt.backend, webPacket)
		for _, want := range []string{tt.live, "  DIFFERS from the desired rules, which say:\n    forwarded through the cluster IP of demo/web:http\n", "  first different step:\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s without demo/web: output lacks %q; got:\n%s", tt.backend, want, out)
			}
		}
		if !errors.Is(err, errDiffer) {
			t.Errorf("%s without demo/web: error %v, want errDiffer", tt.backend, err)
		}
	}

	natDeleted := savedRules(t, func(file, text string) string {
		if file == "iptables-save-nat.txt" {
			return "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\nCOMMIT\n"
		}
		return text
	})
	out, err := explainSaved(t, natDeleted, "iptables", webPacket)
	if !errors.Is(err, errDiffer) || !strings.Contains(out, "  ABSENT: no rules of the proxy in the kernel: the nat table has no chain KUBE-SERVICES\n") {
		t.Errorf("iptables with the nat chains deleted and the filter ones left: error %v, want the rules reported absent; got:\n%s", err, out)
	}

	for _, b := range []string{"iptables", "nftables"} {
		out, err := explainSaved(t, withForeign, b, "tcp [2001:db8:18:41::2]:40000 -> [2001:db8:19::10]:80 from pod")
		if !errors.Is(err, errDiffer) || !strings.Contains(out, "  ABSENT: no rules of the proxy in the kernel") {
			t.Errorf("%s, IPv6: error %v, want the rules reported absent; got:\n%s", b, err, out)
		}
	}
}
