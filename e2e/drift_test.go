//go:build linux

package e2e

import (
	"context"

	"net/http"

	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// drift is one kind of object broken behind a proxy's back: break returns
// the commands that break it in the node's namespace (found from what the
// kernel holds), found is a part of the drift log line's "missing", and
// kind its "kind" (svcproxy.DriftKind, the drift metric's label).
type drift struct {
	name    string
	breakIt func(t *testing.T, node *netns.Host) [][]string
	found   string
	kind    svcproxy.DriftKind
}

// kernelLine runs cmd in node's namespace and returns the submatches of
// re's first match in its output.
func kernelLine(t *testing.T, node *netns.Host, re *regexp.Regexp, cmd ...string) []string {
	t.Helper()
	out, err := node.Run(context.Background(), cmd[0], cmd[1:]...)
	if err != nil {
		t.Fatalf("%v: %v", cmd, err)
	}
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("nothing matches %s in %v:\n%s", re, cmd, out)
	}
	return m
}

var (
	// webJump is the jump of KUBE-SERVICES to the chain of e2e/web's
	// IPv4 cluster IP.
	webJump = regexp.MustCompile(`(?m)^-A KUBE-SERVICES (-d 198\.19\.0\.90/32 .*-j (KUBE-SVC-\S+))$`)
	// webServiceChain is the chain of e2e/web in kube-proxy's nftables
	// layout.
	webServiceChain = regexp.MustCompile(`chain (service-\S+-e2e/web/tcp/p) `)
	// elsewhereServiceChain is the chain of e2e/elsewhere (whose
	// endpoint's port nothing listens on) in kube-proxy's nftables layout.
	elsewhereServiceChain = regexp.MustCompile(`chain (service-\S+-e2e/elsewhere/tcp/p) `)
	// webTarget is the address of e2e/web's target in the flat layout's
	// targets map.
	webTarget = regexp.MustCompile(`198\.19\.0\.90 \. tcp \. 80 \. 0(?: comment "[^"]*")? : (\S+) \. 8080`)
	// firstElement is the first element's key in nft's listing of a set
	// or map.
	firstElement = regexp.MustCompile(`elements = \{ ([^,}:]*?)(?: comment "[^"]*")?(?: :[^,}]*)?\s*[,}\n]`)
)

// drifts are, per backend, the kinds of objects the periodic check must
// find broken: per-Service chains, jumps, map and set elements, whole maps,
// group chains.
var drifts = map[string][]drift{
	"iptables": {
		{"a Service's chain flushed", func(t *testing.T, n *netns.Host) [][]string {
			chain := kernelLine(t, n, webJump, "iptables-save", "-t", "nat")[2]
			return [][]string{{"iptables", "-w", "-t", "nat", "-F", chain}}
		}, "KUBE-SVC-", svcproxy.DriftRule},
		{"a Service's jump and chain deleted", func(t *testing.T, n *netns.Host) [][]string {
			m := kernelLine(t, n, webJump, "iptables-save", "-t", "nat")
			return [][]string{
				append([]string{"iptables", "-w", "-t", "nat", "-D", "KUBE-SERVICES"}, ruleArgs(m[1])...),
				{"iptables", "-w", "-t", "nat", "-F", m[2]}, {"iptables", "-w", "-t", "nat", "-X", m[2]}}
		}, "KUBE-S", svcproxy.DriftRule},
	},
	"nftables": {
		{"a Service's chain flushed", func(t *testing.T, n *netns.Host) [][]string {
			chain := kernelLine(t, n, webServiceChain, "nft", "list", "chains", "ip")[1]
			return [][]string{{"nft", "flush", "chain", "ip", "kube-proxy", chain}}
		}, "chain service-", svcproxy.DriftRule},
		{"a service-ips element deleted", func(*testing.T, *netns.Host) [][]string {
			return [][]string{{"nft", "delete", "element", "ip", "kube-proxy", "service-ips", "{ 198.19.0.90 . tcp . 80 }"}}
		}, "service-ips", svcproxy.DriftElement},
		{"the service-ips map flushed", func(*testing.T, *netns.Host) [][]string {
			return [][]string{{"nft", "flush", "map", "ip", "kube-proxy", "service-ips"}}
		}, "service-ips", svcproxy.DriftElement},
		{"a service-ips element pointed at another Service's chain", func(t *testing.T, n *netns.Host) [][]string {
			other := kernelLine(t, n, elsewhereServiceChain, "nft", "list", "chains", "ip")[1]
			return [][]string{{"nft", "delete", "element", "ip", "kube-proxy", "service-ips", "{ 198.19.0.90 . tcp . 80 }", ";",
				"add", "element", "ip", "kube-proxy", "service-ips", "{ 198.19.0.90 . tcp . 80 : goto " + other + " }"}}
		}, "service-ips has elements other than those written", svcproxy.DriftElement},
		{"a rule of a Service's chain replaced", func(t *testing.T, n *netns.Host) [][]string {
			chain := kernelLine(t, n, webServiceChain, "nft", "list", "chains", "ip")[1]
			return replaceRules(t, n, "kube-proxy", chain, regexp.MustCompile(`numgen|dnat|goto `), "drop")
		}, "has rules other than those written", svcproxy.DriftRule},
	},
	"nftables-flat": {
		{"the cluster group chain flushed", func(*testing.T, *netns.Host) [][]string {
			return [][]string{{"nft", "flush", "chain", "ip", "svcproxy-flat", "cluster"}}
		}, "chain cluster", svcproxy.DriftRule},
		{"a targets map element deleted", func(t *testing.T, n *netns.Host) [][]string {
			key := kernelLine(t, n, firstElement, "nft", "list", "map", "ip", "svcproxy-flat", "cluster-1-tcp-targets")[1]
			return [][]string{{"nft", "delete", "element", "ip", "svcproxy-flat", "cluster-1-tcp-targets", "{ " + strings.TrimSpace(key) + " }"}}
		}, "cluster-1-tcp-targets", svcproxy.DriftElement},
		{"a frontend set element deleted", func(*testing.T, *netns.Host) [][]string {
			return [][]string{{"nft", "delete", "element", "ip", "svcproxy-flat", "cluster-1-tcp", "{ 198.19.0.90 . tcp . 80 }"}}
		}, "cluster-1-tcp", svcproxy.DriftElement},
		{"a targets map element pointed at another port", func(t *testing.T, n *netns.Host) [][]string {
			addr := kernelLine(t, n, webTarget, "nft", "list", "map", "ip", "svcproxy-flat", "cluster-1-tcp-targets")[1]
			return [][]string{{"nft", "delete", "element", "ip", "svcproxy-flat", "cluster-1-tcp-targets", "{ 198.19.0.90 . tcp . 80 . 0 }", ";",
				"add", "element", "ip", "svcproxy-flat", "cluster-1-tcp-targets", "{ 198.19.0.90 . tcp . 80 . 0 : " + addr + " . 1 }"}}
		}, "cluster-1-tcp-targets has elements other than those written", svcproxy.DriftElement},
		{"the cluster group chain's rules replaced", func(t *testing.T, n *netns.Host) [][]string {
			return replaceRules(t, n, "svcproxy-flat", "cluster", regexp.MustCompile(`@cluster-1-tcp-targets`), "ip daddr 198.19.0.90 drop")
		}, "chain cluster has rules other than those written", svcproxy.DriftRule},
	},
}

// TestDriftFoundAndRepaired: each kind of object the proxy owns, broken
// behind its back where the cheap checks do not look, is found by the
// periodic check (logged, naming it and its kind), /healthz and a health check node
// port answer 503 from then until the repair (the proxy logs its health
// turning failing at the check and healthy once the repair is written,
// before the drift line), and the Service is served
// again within two sync-periods (nftables) or a bounded time (iptables,
// whose deep check spaces itself by its cost: every period at this size).
// What /healthz and the health check node port said while it was broken,
// and the time to repair, are logged.
func TestDriftFoundAndRepaired(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1, Clients: 1})
		c.StartEcho(echoPort)
		pod := c.Pods[0]
		p := startProxyWith(t, c, backend, proxySetup{args: []string{"--sync-period", repairSyncPeriod.String()}},
			service("web", ips(90)),
			slice("web", false, v1.ProtocolTCP, ready(c, pod)),
			service("lb", ips(91), withLoadBalancer(serviceIP(false, 191), nil, 30291), withNodePort(30191, true)),
			slice("lb", false, v1.ProtocolTCP, ready(c, pod)),
			service("elsewhere", ips(92)),
			onPort(slice("elsewhere", false, v1.ProtocolTCP, ready(c, pod)), closedPort))
		web, hc := at(serviceIP(false, 90), 80), at(c.Node.IPv4, 30291)
		expectOnly(t, spread(t, c.Clients[0], web, 3), pod)
		// Nothing broken, nothing found: the deep checks agree with the
		// kernel as it prints and dumps what the proxy wrote.
		p.waitPeriodicSync()
		p.waitPeriodicSync()
		if log := p.log.String(); strings.Contains(log, "rules changed behind the proxy's back") {
			t.Fatalf("drift found in an untouched kernel:\n%s", log)
		}
		for _, d := range drifts[backend] {
			p.waitPeriodicSync()
			repairsBefore := strings.Count(p.log.String(), "rules changed behind the proxy's back")
			for _, cmd := range d.breakIt(t, c.Node) {
				if out, err := c.Node.Run(context.Background(), cmd[0], cmd[1:]...); err != nil {
					t.Fatalf("%s: %v: %v\n%s", d.name, cmd, err, out)
				}
			}
			logAt := len(p.log.String())
			broken := time.Now()
			if r, err := c.Clients[0].TCP(web, dropTimeout); err == nil && r.Identity == pod.Label {
				t.Fatalf("%s: %s still served: the change did not break it", d.name, web)
			}
			// Until served again: what /healthz and the health check
			// node port say.
			healthz, hcCodes := map[int]int{}, map[int]int{}
			deadline := broken.Add(2*repairSyncPeriod + 3*time.Second)
			for {
				healthz[p.healthzOrZero()]++
				code, _ := healthCheck(t, c.Clients[0], hc)
				hcCodes[code]++
				if r, err := c.Clients[0].TCP(web, 200*time.Millisecond); err == nil && r.Identity == pod.Label {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %s not served again within %v", d.name, web, deadline.Sub(broken))
				}
			}
			took := time.Since(broken)
			t.Logf("%s-proxy: %s: served again after %v (sync-period %v); meanwhile /healthz %v, health check node port %v",
				backend, d.name, took.Round(10*time.Millisecond), repairSyncPeriod, healthz, hcCodes)
			// The sync logs once it has ended; traffic may flow before.
			logged := time.Now().Add(2 * time.Second)
			for strings.Count(p.log.String(), "rules changed behind the proxy's back") <= repairsBefore && time.Now().Before(logged) {
				time.Sleep(50 * time.Millisecond)
			}
			log := p.log.String()
			if strings.Count(log, "rules changed behind the proxy's back") <= repairsBefore {
				t.Errorf("%s: no drift log line", d.name)
			} else if i := strings.LastIndex(log, "rules changed behind the proxy's back"); !strings.Contains(log[i:], d.found) || !strings.Contains(log[i:], " kind="+string(d.kind)+" ") {
				t.Errorf("%s: the drift log line does not name %q of kind %q: %s", d.name, d.found, d.kind, strings.SplitN(log[i:], "\n", 2)[0])
			}
			// In the log, in this order: /healthz failing from the check
			// that found it, healthy once the repair is written, then the
			// drift line of the repairing sync.
			after := p.log.String()[logAt:]
			failing := strings.Index(after, `msg="health changed" healthy=false syncFailing=true`)
			healthy := strings.Index(after, `msg="health changed" healthy=true syncFailing=false`)
			found := strings.Index(after, "rules changed behind the proxy's back")
			if failing < 0 || healthy < failing || found < healthy {
				t.Errorf("%s: health changes and drift line at %d, %d, %d; want failing, then healthy, then the drift line:\n%s", d.name, failing, healthy, found, after)
			}
			waitHealth := time.Now().Add(2 * time.Second)
			for p.healthzOrZero() != http.StatusOK && time.Now().Before(waitHealth) {
				time.Sleep(50 * time.Millisecond)
			}
			if code := p.healthzOrZero(); code != http.StatusOK {
				t.Errorf("%s: /healthz %d after the repair, want 200", d.name, code)
			}
			if code, body := healthCheck(t, c.Clients[0], hc); code != http.StatusOK || body.LocalEndpoints != 1 {
				t.Errorf("%s: health check node port %d with %d local endpoints after the repair, want 200 with 1", d.name, code, body.LocalEndpoints)
			}
		}
	})
}

// ruleArgs splits a rule of iptables-save into arguments, a double-quoted
// one (a comment with spaces) as one.
func ruleArgs(rule string) []string {
	var args []string
	for rule != "" {
		rule = strings.TrimLeft(rule, " ")
		if strings.HasPrefix(rule, `"`) {
			end := strings.Index(rule[1:], `"`) + 1
			args = append(args, rule[1:end])
			rule = rule[end+1:]
			continue
		}
		arg, rest, _ := strings.Cut(rule, " ")
		args, rule = append(args, arg), rest
	}
	return args
}

// closedPort is a port nothing listens on.
const closedPort = 1

// onPort is es with its port's number port.
func onPort(es *discovery.EndpointSlice, port int32) *discovery.EndpointSlice {
	es.Ports[0].Port = &port
	return es
}

// replaceRules are the nft commands that replace each rule of chain in
// table (in node's namespace) whose text part matches with rule, the
// number of rules kept.
func replaceRules(t *testing.T, node *netns.Host, table, chain string, part *regexp.Regexp, rule string) [][]string {
	t.Helper()
	out, err := node.Run(context.Background(), "nft", "-a", "list", "chain", "ip", table, chain)
	if err != nil {
		t.Fatalf("nft -a list chain %s: %v\n%s", chain, err, out)
	}
	var cmds [][]string
	for _, m := range regexp.MustCompile(`(?m)^\s*(.*) # handle (\d+)$`).FindAllStringSubmatch(out, -1) {
		if !strings.HasPrefix(m[1], "chain ") && part.MatchString(m[1]) {
			cmds = append(cmds, append([]string{"nft", "replace", "rule", "ip", table, chain, "handle", m[2]}, strings.Fields(rule)...))
		}
	}
	if len(cmds) == 0 {
		t.Fatalf("no rule with %q in chain %s:\n%s", part, chain, out)
	}
	return cmds
}
