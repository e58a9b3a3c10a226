package iptrace_test

import (
	"strings"
	"testing"

	"github.com/svcproxy/svcproxy/trace/iptrace"
)

// TestParseRejects: what Evaluate does not model, and malformed text, is
// an error that names the line; nothing is ignored.
func TestParseRejects(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"multiport", "*nat\n:X - [0:0]\n-A X -p tcp -m multiport --dports 80,443 -j ACCEPT\nCOMMIT\n", `line 3: "-A X -p tcp -m multiport --dports 80,443 -j ACCEPT": match "multiport" is not modelled`},
		{"ipset", "*filter\n:X - [0:0]\n-A X -m set --match-set blocked src -j DROP\nCOMMIT\n", `line 3:`},
		{"interface", "*filter\n-A INPUT -i eth0 -j ACCEPT\nCOMMIT\n", `line 2: "-A INPUT -i eth0 -j ACCEPT": option "-i" is not modelled`},
		{"SNAT", "*nat\n-A POSTROUTING -j SNAT --to-source 198.18.0.1\nCOMMIT\n", "line 2: \"-A POSTROUTING -j SNAT --to-source 198.18.0.1\": target SNAT is not modelled"},
		{"DNAT range", "*nat\n-A PREROUTING -p tcp -j DNAT --to-destination 198.18.1.1-198.18.1.9\nCOMMIT\n", "line 2:"},
		{"DNAT option", "*nat\n-A PREROUTING -p tcp -j DNAT --to-destination 198.18.1.1:80 --persistent\nCOMMIT\n", `target option "--persistent" is not modelled`},
		{"port range", "*nat\n-A PREROUTING -p tcp -m tcp --dport 80:90 -j ACCEPT\nCOMMIT\n", "line 2:"},
		{"port without protocol", "*nat\n-A PREROUTING --dport 80 -j ACCEPT\nCOMMIT\n", "--dport without -p"},
		{"option without its match", "*nat\n-A PREROUTING --ctstate NEW -j ACCEPT\nCOMMIT\n", "--ctstate without -m conntrack"},
		{"addrtype other than LOCAL", "*nat\n-A PREROUTING -m addrtype --dst-type UNICAST -j ACCEPT\nCOMMIT\n", "only LOCAL is modelled"},
		{"statistic nth", "*nat\n-A PREROUTING -m statistic --mode nth --every 2 -j ACCEPT\nCOMMIT\n", "line 2:"},
		{"probability above 1", "*nat\n-A PREROUTING -m statistic --mode random --probability 1.5 -j ACCEPT\nCOMMIT\n", "not a number from 0 to 1"},
		{"recent update", "*nat\n-A PREROUTING -m recent --name X --update --seconds 5 -j ACCEPT\nCOMMIT\n", "line 2:"},
		{"recent rcheck without seconds", "*nat\n-A PREROUTING -m recent --name X --rcheck -j ACCEPT\nCOMMIT\n", "only --rcheck --seconds N or --set"},
		{"unknown conntrack state", "*filter\n-A INPUT -m conntrack --ctstate FOO -j ACCEPT\nCOMMIT\n", `conntrack state "FOO"`},
		{"jump to a missing chain", "*nat\n-A PREROUTING -j KUBE-NOWHERE\nCOMMIT\n", `line 3: table nat, line 2: "-A PREROUTING -j KUBE-NOWHERE" jumps to KUBE-NOWHERE`},
		{"rule in a missing chain", "*nat\n-A KUBE-X -j ACCEPT\nCOMMIT\n", "line 2: -A KUBE-X: no such chain in table nat"},
		{"rule outside a table", "-A INPUT -j ACCEPT\n", `line 1: "-A INPUT -j ACCEPT" outside a table`},
		{"no COMMIT", "*nat\n:X - [0:0]\n", "table nat: no COMMIT"},
		{"bad policy", "*filter\n:INPUT REJECT [0:0]\nCOMMIT\n", "line 2: built-in chain INPUT: policy \"REJECT\""},
		{"delete a chain in use", "*nat\n:X - [0:0]\n-A PREROUTING -j X\n-X X\nCOMMIT\n", "line 4: -X X: still jumped to from PREROUTING"},
		{"unterminated quote", "*nat\n:X - [0:0]\n-A X -m comment --comment \"open -j ACCEPT\nCOMMIT\n", "line 3: unterminated quote"},
		{"text after the target", "*nat\n-A PREROUTING -j ACCEPT -p tcp\nCOMMIT\n", `unexpected "-p" after the target`},
		{"negated jump", "*nat\n:X - [0:0]\n-A PREROUTING ! -j X\nCOMMIT\n", "! before -j"},
	} {
		_, err := iptrace.Parse([]byte(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestParseRestoreSemantics: the text is applied as iptables-restore
// --noflush applies it.
func TestParseRestoreSemantics(t *testing.T) {
	const base = "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n" +
		"-A PREROUTING -j KUBE-SERVICES\n" +
		"-A KUBE-SERVICES -m comment --comment \"ns/a:p cluster IP\" -p tcp -d 198.19.0.1 --dport 80 -j KUBE-SVC-A\n" +
		"-A KUBE-SVC-A -m comment --comment ns/a:p -p tcp -j DNAT --to-destination 198.18.1.1:8080\nCOMMIT\n"
	p := "tcp 198.18.1.5:40000 -> 198.19.0.1:80 from pod"
	for _, tc := range []struct{ name, more, want string }{
		{"as written", "", "forwarded ns/a:p/TCP (cluster IP) 198.18.1.1:8080 1.000"},
		{"a chain declared again is flushed", "*nat\n:KUBE-SVC-A - [0:0]\nCOMMIT\n", "not a Service"},
		{"-F flushes", "*nat\n-F KUBE-SERVICES\nCOMMIT\n", "not a Service"},
		{"-I inserts first", "*nat\n-I KUBE-SERVICES -p tcp -j ACCEPT\nCOMMIT\n", "not a Service"},
		{"nfacct only counts: it matches", "*nat\n-I PREROUTING -m nfacct --nfacct-name  pkts -j ACCEPT\nCOMMIT\n", "not a Service"},
		{"-I at a position", "*nat\n-I KUBE-SERVICES 2 -p tcp -j ACCEPT\nCOMMIT\n", "forwarded ns/a:p/TCP (cluster IP) 198.18.1.1:8080 1.000"},
		{"-X of a flushed chain nothing jumps to", "*nat\n:KUBE-OLD - [0:0]\n-X KUBE-OLD\nCOMMIT\n", "forwarded ns/a:p/TCP (cluster IP) 198.18.1.1:8080 1.000"},
		{"counters before a rule", "*filter\n[12:345] -A FORWARD -j DROP\nCOMMIT\n", "dropped"},
		{"policy DROP", "*filter\n:FORWARD DROP [0:0]\nCOMMIT\n", "dropped"},
		{"other tables are skipped", "*mangle\n-A PREROUTING -j MARK --set-mark 1 -m weird\nCOMMIT\n", "forwarded ns/a:p/TCP (cluster IP) 198.18.1.1:8080 1.000"},
	} {
		rules, err := iptrace.Parse([]byte(base + tc.more))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		o, path, err := rules.Evaluate(packet(t, p))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := summary(o); got != tc.want {
			t.Errorf("%s: got %s, want %s\npath:\n%s", tc.name, got, tc.want, path)
		}
	}
}
