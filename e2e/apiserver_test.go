//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/apiserver"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/servicemap"
)

// TestAPIServerServiceLifecycle: against a real API server, a Service
// created through the API is served; its endpoints becoming terminating and
// then gone are followed (ready first, serving-terminating as the fallback,
// refused with none); a Service labelled for another proxy is ignored until
// the label goes.
func TestAPIServerServiceLifecycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		ac := newAPICluster(t, netns.ClusterSpec{Pods: 2}, apiserver.Options{})
		ac.StartEcho(echoPort)
		p0, p1 := ac.Pods[0], ac.Pods[1]
		p := ac.startProxy(backend, "")
		client := p.inside(ac.Clients[0])

		web := apiService("web", 20)
		addr := at(serviceIP(false, 20), 80)
		ac.put(web)
		ac.put(slice("web", false, v1.ProtocolTCP, ready(ac.Cluster, p0), ready(ac.Cluster, p1)))
		eventuallyReaches(t, client, addr, p0, p1)
		expectUniform(t, spread(t, client, addr, 90), p0, p1)

		ac.put(slice("web", false, v1.ProtocolTCP, ready(ac.Cluster, p0), ready(ac.Cluster, p1).terminatingServing()))
		eventuallyReaches(t, client, addr, p0)
		ac.put(slice("web", false, v1.ProtocolTCP, ready(ac.Cluster, p1).terminatingServing()))
		eventuallyReaches(t, client, addr, p1)
		ac.remove(slice("web", false, v1.ProtocolTCP))
		eventuallyFails(t, client, addr, netns.ErrRefused)

		other := apiService("other", 21)
		other.Labels = map[string]string{servicemap.LabelServiceProxyName: "another-proxy"}
		ac.put(other)
		ac.put(slice("other", false, v1.ProtocolTCP, ready(ac.Cluster, p0)))
		// The Service below is created after the labelled one: once it is
		// served, the proxy has seen the labelled one too.
		ac.put(apiService("marker", 22))
		ac.put(slice("marker", false, v1.ProtocolTCP, ready(ac.Cluster, p1)))
		eventuallyReaches(t, client, at(serviceIP(false, 22), 80), p1)
		p.expectDropped(client, at(serviceIP(false, 21), 80))

		other.Labels = nil
		ac.put(other)
		eventuallyReaches(t, client, at(serviceIP(false, 21), 80), p0)
	})
}

// TestAPIServerNodeZone: the zone used for topology is the label of the
// proxy's own Node, read from the API server, and follows a change of it.
// The test writes the zone hints of PreferSameZone itself, as the
// EndpointSlice controller would: with --kubeconfig the proxies take hints
// as the controller wrote them, as kube-proxy does.
func TestAPIServerNodeZone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		ac := newAPICluster(t, netns.ClusterSpec{Pods: 3}, apiserver.Options{})
		ac.StartEcho(echoPort)
		a, b1, b2 := ac.Pods[0], ac.Pods[1], ac.Pods[2]
		p := ac.startProxy(backend, "")
		client := p.inside(ac.Clients[0])

		ac.put(apiService("zonal", 30, withTrafficDistribution(v1.ServiceTrafficDistributionPreferSameZone)))
		ac.put(withZoneHints(slice("zonal", false, v1.ProtocolTCP,
			ready(ac.Cluster, a), ready(ac.Cluster, b1).inZone("zone-b"), ready(ac.Cluster, b2).inZone("zone-b"))))
		addr := at(serviceIP(false, 30), 80)
		eventuallyReaches(t, client, addr, a)

		node := nodeObject()
		node.Labels[v1.LabelTopologyZone] = "zone-b"
		ac.put(node)
		eventuallyReaches(t, client, addr, b1, b2)
		expectUniform(t, spread(t, client, addr, 90), b1, b2)
	})
}

// TestAPIServerServiceCIDR: a ServiceCIDR object created through the API
// lets the API server allocate from its range, the proxies serve a Service
// there, and the nftables proxy drops traffic to the range's unallocated
// addresses until the ServiceCIDR is deleted.
func TestAPIServerServiceCIDR(t *testing.T) {
	const extra = "198.19.8.0/24" // not adjacent to the default range: nft would merge them
	forEachBackend(t, func(t *testing.T, backend string) {
		ac := newAPICluster(t, netns.ClusterSpec{Pods: 1}, apiserver.Options{})
		ac.StartEcho(echoPort)
		p := ac.startProxy(backend, "")
		if strings.Contains(p.kernelState(), extra) {
			t.Fatalf("%s in the rules before any ServiceCIDR has it:\n%s", extra, p.kernelState())
		}

		cidr := &networkingv1.ServiceCIDR{
			TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "ServiceCIDR"},
			ObjectMeta: metav1.ObjectMeta{Name: "extra"},
			Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{extra}},
		}
		ac.put(cidr)
		svc := service("beyond", []netip.Addr{netip.MustParseAddr("198.19.8.10")})
		// The allocator takes up a new ServiceCIDR asynchronously.
		waitFor(t, "a Service in the new ServiceCIDR to be accepted", func() (bool, string) {
			err := apply(ac.client, svc)
			return err == nil, fmt.Sprint(err)
		})
		ac.put(slice("beyond", false, v1.ProtocolTCP, ready(ac.Cluster, ac.Pods[0])))
		eventuallyReaches(t, p.inside(ac.Clients[0]), at(netip.MustParseAddr("198.19.8.10"), 80), ac.Pods[0])
		if backend != "nftables" {
			return
		}
		waitFor(t, "the nftables rules to drop unallocated addresses of "+extra, func() (bool, string) {
			state := p.kernelState()
			return strings.Contains(state, extra), state
		})
		expectDropped(t, ac.Clients[0], at(netip.MustParseAddr("198.19.8.99"), 80))

		ac.remove(svc)
		ac.remove(cidr)
		waitFor(t, "the nftables rules to forget "+extra, func() (bool, string) {
			state := p.kernelState()
			return !strings.Contains(state, extra), state
		})
	})
}

// TestAPIServerRestart: while the API server is down the proxy keeps its
// rules (and keeps syncing from what it knows); once the server is back it
// reconnects and follows changes made before and after the outage.
func TestAPIServerRestart(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		ac := newAPICluster(t, netns.ClusterSpec{Pods: 2}, apiserver.Options{})
		ac.StartEcho(echoPort)
		p0, p1 := ac.Pods[0], ac.Pods[1]
		p := ac.startProxy(backend, "", "--sync-period", "1s")
		client := p.inside(ac.Clients[0])
		kept, gone := at(serviceIP(false, 40), 80), at(serviceIP(false, 41), 80)
		ac.put(apiService("kept", 40))
		ac.put(slice("kept", false, v1.ProtocolTCP, ready(ac.Cluster, p0)))
		ac.put(apiService("gone", 41))
		ac.put(slice("gone", false, v1.ProtocolTCP, ready(ac.Cluster, p1)))
		eventuallyReaches(t, client, kept, p0)
		eventuallyReaches(t, client, gone, p1)

		ac.api.StopAPIServer()
		before := p.syncs()
		p.waitSyncs(before + 2) // periodic syncs, from the proxy's caches
		expectOnly(t, spread(t, client, kept, 10), p0)
		expectOnly(t, spread(t, client, gone, 10), p1)

		ac.api.StartAPIServer()
		ac.put(slice("kept", false, v1.ProtocolTCP, ready(ac.Cluster, p0), ready(ac.Cluster, p1)))
		ac.remove(apiService("gone", 41))
		eventuallyReaches(t, client, kept, p0, p1)
		eventuallyFails(t, client, gone, p.dropError(client))
	})
}

// TestAPIServerRelistAfterCompaction: changes the proxy missed while its
// watches were down, and could not resume from (etcd compacted past them, a
// fresh API server cache), are picked up by a relist: the proxy keeps its
// rules meanwhile and converges, deletions included.
func TestAPIServerRelistAfterCompaction(t *testing.T) {
	forEachBackend(t, func(t *testing.T, backend string) {
		ac := newAPICluster(t, netns.ClusterSpec{Pods: 2}, apiserver.Options{})
		ac.StartEcho(echoPort)
		p0, p1 := ac.Pods[0], ac.Pods[1]
		p := ac.startProxy(backend, "")
		client := p.inside(ac.Clients[0])
		kept, gone, added := at(serviceIP(false, 50), 80), at(serviceIP(false, 51), 80), at(serviceIP(false, 52), 80)
		ac.put(apiService("kept", 50))
		ac.put(slice("kept", false, v1.ProtocolTCP, ready(ac.Cluster, p0)))
		ac.put(apiService("gone", 51))
		ac.put(slice("gone", false, v1.ProtocolTCP, ready(ac.Cluster, p1)))
		eventuallyReaches(t, client, kept, p0)
		eventuallyReaches(t, client, gone, p1)

		// Frozen while the API server restarts, the proxy loses its watches
		// without reconnecting: the kernel cannot buffer for it what the API
		// server never sends.
		signal(t, p, syscall.SIGSTOP)
		t.Cleanup(func() { _ = p.proc.Cmd.Process.Signal(syscall.SIGCONT) })
		ac.api.StopAPIServer()
		ac.api.StartAPIServer()
		ac.put(slice("kept", false, v1.ProtocolTCP, ready(ac.Cluster, p1)))
		ac.remove(apiService("gone", 51))
		ac.remove(slice("gone", false, v1.ProtocolTCP))
		ac.put(apiService("added", 52))
		ac.put(slice("added", false, v1.ProtocolTCP, ready(ac.Cluster, p0)))
		t.Logf("etcd compacted at revision %d", ac.api.CompactEtcd())
		// A fresh cache, whose history starts after the compaction.
		ac.api.StopAPIServer()
		ac.api.StartAPIServer()
		auditBefore := len(ac.api.Audit())
		expectOnly(t, spread(t, client, gone, 5), p1) // the last rules, still

		signal(t, p, syscall.SIGCONT)
		eventuallyReaches(t, client, kept, p1)
		eventuallyReaches(t, client, added, p0)
		eventuallyFails(t, client, gone, p.dropError(client))
		after := ac.api.Audit()[auditBefore:]
		if lists := relists(after); lists == 0 {
			t.Errorf("no list (or watch with sendInitialEvents) by %s after the compaction; audit:\n%s", proxyUser, after)
		} else {
			t.Logf("%d audit events of lists by the proxy after the compaction", lists)
		}
	})
}

// signal sends sig to the proxy's process, by its PID.
func signal(t *testing.T, p *proxy, sig syscall.Signal) {
	t.Helper()
	if err := p.proc.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to the proxy: %v", sig, err)
	}
}

// relists counts, in audit log lines, the requests that list a resource
// from scratch: verb list, or a watch that asks for the initial events.
func relists(audit string) int {
	n := 0
	for _, line := range strings.Split(audit, "\n") {
		var event struct {
			Verb       string `json:"verb"`
			RequestURI string `json:"requestURI"`
		}
		if json.Unmarshal([]byte(line), &event) != nil {
			continue
		}
		if event.Verb == "list" || strings.Contains(event.RequestURI, "sendInitialEvents=true") {
			n++
		}
	}
	return n
}
