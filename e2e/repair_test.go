//go:build linux

package e2e

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// repairSyncPeriod is the --sync-period of the repair tests.
const repairSyncPeriod = 3 * time.Second

// outsideFlushes are what someone else may do to a backend's rules behind
// its back: empty one chain, one table, or everything.
var outsideFlushes = map[string][]struct {
	name     string
	commands [][]string
}{
	"iptables": {
		{"one chain", [][]string{
			{"iptables", "-w", "-t", "nat", "-F", "KUBE-SERVICES"},
			{"ip6tables", "-w", "-t", "nat", "-F", "KUBE-SERVICES"}}},
		{"one table", [][]string{
			{"iptables", "-w", "-t", "nat", "-F"},
			{"ip6tables", "-w", "-t", "nat", "-F"}}},
		{"every chain and rule", [][]string{
			{"iptables", "-w", "-t", "nat", "-F"}, {"iptables", "-w", "-t", "nat", "-X"},
			{"iptables", "-w", "-t", "filter", "-F"}, {"iptables", "-w", "-t", "filter", "-X"},
			{"ip6tables", "-w", "-t", "nat", "-F"}, {"ip6tables", "-w", "-t", "nat", "-X"},
			{"ip6tables", "-w", "-t", "filter", "-F"}, {"ip6tables", "-w", "-t", "filter", "-X"}}},
	},
	"nftables": {
		{"one chain", [][]string{{"nft", "flush", "chain", "ip", "kube-proxy", "services"}}},
		{"one table", [][]string{{"nft", "delete", "table", "ip6", "kube-proxy"}}},
		{"the whole ruleset", [][]string{{"nft", "flush", "ruleset"}}},
	},
	"nftables-flat": {
		{"one chain", [][]string{{"nft", "flush", "chain", "ip", "svcproxy-flat", "services"}}},
		{"one table", [][]string{{"nft", "delete", "table", "ip6", "svcproxy-flat"}}},
		{"the whole ruleset", [][]string{{"nft", "flush", "ruleset"}}},
	},
}

// TestRepairAfterOutsideFlush: rules flushed or deleted behind the proxy's
// back are back, and the Service served in both families, within one
// sync-period. Each flush is made just after a periodic sync, so that the
// test sees the Service broken first (dropped, or refused by what is left
// of nftables' rules); the time from the flush to the first
// connection served again is logged.
func TestRepairAfterOutsideFlush(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		c := netns.NewCluster(t, netns.ClusterSpec{Pods: 1})
		c.StartEcho(echoPort)
		pod := c.Pods[0]
		p := startProxyWith(t, c, backend, proxySetup{args: []string{"--sync-period", repairSyncPeriod.String()}},
			service("web", ips(80)),
			slice("web", false, v1.ProtocolTCP, ready(c, pod)),
			slice("web", true, v1.ProtocolTCP, ready(c, pod)))
		addrs := []netip.AddrPort{at(serviceIP(false, 80), 80), at(serviceIP(true, 80), 80)}
		for _, addr := range addrs {
			expectOnly(t, spread(t, c.Clients[0], addr, 3), pod)
		}
		for _, flush := range outsideFlushes[backend] {
			p.waitPeriodicSync()
			for _, cmd := range flush.commands {
				c.Node.MustRun(cmd[0], cmd[1:]...)
			}
			flushed := time.Now()
			broken := addrs[0]
			if flush.name == "one table" && proxyName(backend) == "nftables" {
				broken = addrs[1] // the ip6 table
			}
			if r, err := c.Clients[0].TCP(broken, dropTimeout); err == nil {
				t.Fatalf("after %s flushed, %s still served by %s: the flush did not break it", flush.name, broken, r.Identity)
			}
			for _, addr := range addrs {
				waitServed(t, c.Clients[0], addr, pod, flushed.Add(repairSyncPeriod+2*time.Second))
			}
			t.Logf("%s-proxy: %s flushed, served again after %v (sync-period %v)",
				backend, flush.name, time.Since(flushed).Round(10*time.Millisecond), repairSyncPeriod)
			// Traffic may flow again before the repairing sync has ended
			// (its other family, its bookkeeping): /healthz follows it.
			code, healthy := p.healthz(), time.Now().Add(2*time.Second)
			for code != http.StatusOK && time.Now().Before(healthy) {
				time.Sleep(50 * time.Millisecond)
				code = p.healthz()
			}
			if code != http.StatusOK {
				t.Errorf("2 s after the repair of %s: /healthz %d, want 200", flush.name, code)
			}
		}
	})
}

// waitServed polls, until deadline, for a TCP connection from d to addr
// that pod answers.
func waitServed(t *testing.T, d dialer, addr netip.AddrPort, pod *netns.Host, deadline time.Time) {
	t.Helper()
	for {
		r, err := d.TCP(addr, 300*time.Millisecond)
		if err == nil && r.Identity == pod.Label {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not served by %s by the deadline: last reply %+v, error %v", addr, pod.Label, r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// periodicSyncs counts the proxy's successful periodic syncs so far.
func (p *proxy) periodicSyncs() int {
	n := 0
	for _, line := range strings.Split(p.log.String(), "\n") {
		if strings.Contains(line, "msg=synced") && strings.Contains(line, "periodic=true") {
			n++
		}
	}
	return n
}

// waitPeriodicSync waits, at most three sync periods, for the proxy's next
// successful periodic sync.
func (p *proxy) waitPeriodicSync() {
	p.t.Helper()
	before := p.periodicSyncs()
	deadline := time.Now().Add(3 * repairSyncPeriod)
	for p.periodicSyncs() == before {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s-proxy made no periodic sync within %v", p.backend, 3*repairSyncPeriod)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// healthz is the status code of the proxy's /healthz, asked from the node.
func (p *proxy) healthz() int {
	p.t.Helper()
	code, err := p.healthzAnswer()
	if err != nil {
		p.t.Fatalf("/healthz: %v", err)
	}
	return code
}

// healthzOrZero is healthz, 0 when it does not answer.
func (p *proxy) healthzOrZero() int {
	code, _ := p.healthzAnswer()
	return code
}

// healthzAnswer asks the proxy's /healthz from the node.
func (p *proxy) healthzAnswer() (int, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
			return p.node.Dial("tcp", netip.AddrPort{}, netip.MustParseAddrPort(addr), 2*time.Second)
		},
	}}
	resp, err := client.Get("http://" + netip.AddrPortFrom(p.node.IPv4, 10256).String() + "/healthz")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
