//go:build linux

package differential

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"pgregory.net/rapid"
)

// EnvStates sets how many generated states a run compares (default
// defaultStates); -rapid.checks, when given, wins.
const EnvStates = "SVCPROXY_DIFF_STATES"

// defaultStates keeps the default run within a few minutes (see
// CONTRIBUTING.md for the time one state takes).
const defaultStates = 50

// pair is kube-proxy and our proxy in the same mode.
type pair struct {
	mode      string // "iptables", "nftables (kube-proxy layout)", …
	backend   string // "iptables" or "nftables": which evaluator reads them
	ref, ours *proxy
}

// TestIPTablesMatchesKubeProxy: for generated cluster states, the rules of
// kube-proxy's iptables mode and of our iptables proxy send every probe
// the same way.
func TestIPTablesMatchesKubeProxy(t *testing.T) {
	w := newWorld(t)
	w.putNodes()
	kp := w.startKubeProxy("iptables")
	ours := w.startOurs("iptables")
	w.run(t, []pair{{mode: "iptables", backend: "iptables", ref: kp, ours: ours}})
}

// TestNFTablesMatchesKubeProxy: for generated cluster states, the rules of
// kube-proxy's nftables mode and of our nftables proxy, in kube-proxy's
// layout and in the flat one, send every probe the same way.
func TestNFTablesMatchesKubeProxy(t *testing.T) {
	w := newWorld(t)
	w.putNodes()
	kp := w.startKubeProxy("nftables")
	ours := w.startOurs("nftables")
	flat := w.startOurs("nftables", "--nftables-layout", "flat")
	w.run(t, []pair{
		{mode: "nftables (kube-proxy layout)", backend: "nftables", ref: kp, ours: ours},
		{mode: "nftables (flat layout)", backend: "nftables", ref: kp, ours: flat},
	})
}

// putNodes applies the proxies' Node (in zone-a) and the other Nodes the
// generated endpoints name, each in its zone (see zones).
func (w *world) putNodes() {
	w.t.Helper()
	w.putNode("zone-a")
	for _, name := range nodeNames[1:] {
		w.put(&v1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelTopologyZone: zones[name]}}})
	}
}

// putNode applies the proxies' Node, in zone, with its addresses.
func (w *world) putNode(zone string) {
	w.t.Helper()
	n := ownNode(zone)
	status, err := json.Marshal(map[string]any{"status": map[string]any{"addresses": n.Status.Addresses}})
	if err != nil {
		w.t.Fatal(err)
	}
	n.Status = v1.NodeStatus{}
	w.put(n)
	// A merge patch: server-side apply refuses two addresses of one type.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := w.client.CoreV1().Nodes().Patch(ctx, nodeName, types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		w.t.Fatalf("node status: %v", err)
	}
}

// totals sum comparisons over the states of a run, per mode.
type totals struct {
	states, probes int
	// differences are the unexplained ones (each fails its state).
	differences                 int
	kernel                      int // probes also sent through both kernels
	special                     int // probes to special-purpose addresses
	undefined, inCase, verdicts map[string]int
	// listedTwice and listedTwiceDeterministic are comparison's.
	listedTwice, listedTwiceDeterministic int
}

// run compares the pairs on generated states, one after another on the
// same API server, and fails naming the state, the probes and both
// outcomes where a pair differs.
func (w *world) run(t *testing.T, pairs []pair) {
	setStates(t)
	for _, u := range undefinedCases {
		t.Logf("kube-proxy's outcome undefined (a difference is counted, not failed): %s: %s", u.name, u.reason)
	}
	sum := map[string]*totals{}
	for _, p := range pairs {
		sum[p.mode] = &totals{undefined: map[string]int{}, inCase: map[string]int{}, verdicts: map[string]int{}}
	}
	var (
		index    int
		previous []string
		elapsed  time.Duration
	)
	rapid.Check(t, func(rt *rapid.T) {
		start := time.Now()
		index++
		st := genState(rt).named(index)
		stored := w.applyState(st)
		dumps, err := w.waitSynced(stored, previous)
		if err != nil {
			rt.Fatalf("state %d: %v\n%s", index, err, describe(st, stored))
		}
		previous = previous[:0]
		for _, svc := range stored {
			previous = append(previous, namespace+"/"+svc.Name)
		}
		var report []string
		for _, p := range pairs {
			for _, ipv6 := range []bool{false, true} {
				ref, ours := dumps[p.ref].v4, dumps[p.ours].v4
				if ipv6 {
					ref, ours = dumps[p.ref].v6, dumps[p.ours].v6
				}
				re, err := parse(p.backend, ref)
				if err != nil {
					rt.Fatalf("%s: kube-proxy's rules do not parse: %v\n%s", p.mode, err, ref)
				}
				oe, err := parse(p.backend, ours)
				if err != nil {
					rt.Fatalf("%s: our rules do not parse: %v\n%s", p.mode, err, ours)
				}
				ps := probes(stored, st.slices, ipv6)
				c := compare(p.mode, re, oe, ps)
				for _, pr := range ps {
					if special(pr.packet.Dst.Addr()) && !pr.front.nodeOnly {
						sum[p.mode].special++
					}
				}
				if index <= kernelStates {
					sent, rep := sampleKernels(p, ps, re, oe)
					sum[p.mode].kernel += sent
					report = append(report, rep...)
				}
				s := sum[p.mode]
				s.probes += c.probes
				for name, n := range c.undefined {
					s.undefined[name] += n
				}
				for name, n := range c.inCase {
					s.inCase[name] += n
				}
				s.listedTwice += c.listedTwice
				s.listedTwiceDeterministic += c.listedTwiceDeterministic
				s.differences += len(c.differences)
				for v, n := range c.verdicts {
					s.verdicts[v] += n
				}
				for i, d := range c.differences {
					if i == 10 {
						report = append(report, fmt.Sprintf("%s: … and %d more", p.mode, len(c.differences)-10))
						break
					}
					report = append(report, fmt.Sprintf("%s: %v", p.mode, d))
				}
				if len(c.differences) > 0 {
					rt.Logf("%s IPv6=%v: kube-proxy's rules:\n%s\nours:\n%s", p.mode, ipv6, ref, ours)
				}
			}
			sum[p.mode].states++
		}
		elapsed += time.Since(start)
		if len(report) > 0 {
			rt.Fatalf("state %d differs:\n%s\n%s", index, describe(st, stored), strings.Join(report, "\n"))
		}
	})
	for _, p := range pairs {
		s := sum[p.mode]
		undefined := 0
		for _, n := range s.undefined {
			undefined += n
		}
		t.Logf("%s: compared %d states, %d probes: %d differences, %d unexplained, %d in kube-proxy's undefined cases (kube-proxy's outcomes: %v); per state %v; %d probes also sent through both kernels",
			p.mode, s.states, s.probes, s.differences+undefined, s.differences, undefined, s.verdicts, (elapsed / time.Duration(max(index, 1))).Round(time.Millisecond), s.kernel)
		for _, u := range undefinedCases {
			t.Logf("%s: kube-proxy's undefined case %q: %d probes, %d of them differ", p.mode, u.name, s.inCase[u.name], s.undefined[u.name])
		}
		t.Logf("%s: %d probes of Service ports with an endpoint listed twice, %d of them outside the undefined cases (all equal)",
			p.mode, s.listedTwice, s.listedTwiceDeterministic)
		t.Logf("%s: %d probes to special-purpose addresses (unspecified, loopback, link-local, multicast cluster and load-balancer IPs)", p.mode, s.special)
	}
}

// setStates sets rapid's number of checks from $SVCPROXY_DIFF_STATES (or
// defaultStates), unless -rapid.checks was given.
func setStates(t *testing.T) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "rapid.checks" })
	if given {
		return
	}
	n := defaultStates
	if s := os.Getenv(EnvStates); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("%s=%q: want a positive number", EnvStates, s)
		}
		n = v
	}
	if err := flag.Set("rapid.checks", strconv.Itoa(n)); err != nil {
		t.Fatal(err)
	}
}

// applyState replaces the previous state's objects with st's and returns
// st's Services as the API server stored them (cluster IPs and node ports
// allocated, load-balancer status set).
func (w *world) applyState(st state) []*v1.Service {
	w.t.Helper()
	w.deleteAll()
	w.putNode(st.zone)
	for _, es := range st.slices {
		w.put(es)
	}
	var stored []*v1.Service
	for _, svc := range st.services {
		got := w.put(svc).(*v1.Service)
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			withStatus := &v1.Service{TypeMeta: svc.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace}, Status: svc.Status}
			s, err := apply(w.client, withStatus, "status")
			if err != nil {
				w.t.Fatal(err)
			}
			got = s.(*v1.Service)
		}
		stored = append(stored, got)
	}
	return stored
}

// describe is a state as the test applied it, for a failure message.
func describe(st state, stored []*v1.Service) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s zone %q\n", nodeName, st.zone)
	for _, svc := range stored {
		spec, _ := json.Marshal(svc.Spec)
		status, _ := json.Marshal(svc.Status.LoadBalancer)
		fmt.Fprintf(&b, "Service %s: %s status %s\n", svc.Name, spec, status)
	}
	for _, es := range st.slices {
		eps, _ := json.Marshal(struct {
			Endpoints []discovery.Endpoint
			Ports     []discovery.EndpointPort
		}{es.Endpoints, es.Ports})
		fmt.Fprintf(&b, "EndpointSlice %s/%s (%s, %s): %s\n", es.Namespace, es.Name, es.Labels[discovery.LabelServiceName], es.AddressType, eps)
	}
	return b.String()
}
