//go:build linux

package differential

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/svcproxy/svcproxy/internal/testkit/apiserver"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/proxybin"
)

// The world's addresses. Every proxy's node has the same addresses (a
// netns.Cluster's), and reaches the API server through a veth of its own:
// 198.18.(2+i).2 → 198.18.(2+i).1, routed to apiAddr.
var (
	apiAddr   = netip.MustParseAddr("198.18.1.1")
	nodeAddr4 = netip.MustParseAddr("198.18.0.1")
	nodeAddr6 = netip.MustParseAddr("2001:db8:18::1")
	// otherAddr4 and otherAddr6 are addresses of the node too, on the same
	// interface, but not the Node's: node ports are not served there.
	otherAddr4 = netip.MustParseAddr("198.18.0.9")
	otherAddr6 = netip.MustParseAddr("2001:db8:18::9")
)

const (
	nodeName  = "node-a"
	namespace = "diff"
	// otherNamespace holds slices labelled for a Service of namespace
	// (which are not that Service's).
	otherNamespace = "diff-other"
	// syncTimeout bounds the wait for every proxy to follow a state.
	syncTimeout = 30 * time.Second
	// stablePolls is how many polls in a row (pollInterval apart) must read
	// the same rules before a state counts as synced: the proxies' minimum
	// sync periods are shorter.
	stablePolls  = 3
	pollInterval = 150 * time.Millisecond
)

// world is the API server and the proxies under comparison.
type world struct {
	t       *testing.T
	lab     *netns.Lab
	api     *apiserver.Server
	client  kubernetes.Interface
	proxies []*proxy
	nextNet int // third octet of the next proxy's link to the API server
}

// newWorld starts etcd and kube-apiserver in a namespace of their own and
// creates the test's Namespace.
func newWorld(t *testing.T) *world {
	t.Helper()
	apiserver.Require(t)
	lab := netns.NewLab(t)
	api := lab.NewNS("api")
	api.AddSink("api0")
	api.AddAddr("api0", netip.PrefixFrom(apiAddr, 32))
	w := &world{t: t, lab: lab, nextNet: 2}
	w.api = apiserver.Start(t, api, apiAddr, apiserver.Options{})
	cfg := w.api.RESTConfig(w.api.Token(apiserver.AdminUser))
	cfg.WarningHandler = rest.NoWarnings{} // externalIPs are deprecated: every state would say so
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.client = client
	for _, ns := range []string{namespace, otherNamespace} {
		w.put(&v1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	w.putSpecialServiceCIDRs()
	return w
}

// putSpecialServiceCIDRs applies the ServiceCIDRs of specialServiceCIDRs
// and waits until the API server allocates from each (a dry-run Service
// with its first address), within 30 s.
func (w *world) putSpecialServiceCIDRs() {
	w.t.Helper()
	for i, cidrs := range specialServiceCIDRs {
		w.put(&networking.ServiceCIDR{TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "ServiceCIDR"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("special-%d", i)}, Spec: networking.ServiceCIDRSpec{CIDRs: cidrs}})
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, cidrs := range specialServiceCIDRs {
		for _, c := range cidrs {
			ip := netip.MustParsePrefix(c).Addr().Next().String()
			svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: namespace},
				Spec: v1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip}, Ports: []v1.ServicePort{{Port: 80}}}}
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := w.client.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				cancel()
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					w.t.Fatalf("ServiceCIDR %s: no allocation within 30 s: %v", c, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
}

// kernelPods is the shape of each proxy's cluster: pods 0…12 on the node
// (the endpoints the generator draws, 0…11, and the local pod source, 12),
// pod 13 on a remote node (the remote pod source), two outside clients.
var kernelPods = netns.ClusterSpec{Pods: 13, RemotePods: 1, Clients: 2}

// echoPorts are the target ports of the generated states: every pod
// answers on them.
var echoPorts = []uint16{8000, 8001, 8002}

// proxyCluster creates the node of a proxy, as a netns.Cluster of shape
// kernelPods whose pods answer on echoPorts: the node addresses and
// otherAddr4/6 on eth0, and a route to the API server over a veth of its
// own.
func (w *world) proxyCluster() *netns.Cluster {
	w.t.Helper()
	c := netns.NewCluster(w.t, kernelPods)
	ns := c.Node.NS
	label := fmt.Sprintf("p%d", w.nextNet)
	api := w.lab.Namespaces()[0]
	n := w.nextNet
	w.nextNet++
	w.lab.Veth(api, "to"+label, ns, "api0")
	api.AddAddr("to"+label, netip.MustParsePrefix(fmt.Sprintf("198.18.%d.1/24", n)))
	ns.AddAddr("api0", netip.MustParsePrefix(fmt.Sprintf("198.18.%d.2/24", n)))
	ns.AddRoute(netip.PrefixFrom(apiAddr, 32), netip.MustParseAddr(fmt.Sprintf("198.18.%d.1", n)), "api0")
	ns.AddAddr("eth0", netip.PrefixFrom(otherAddr4, 24))
	ns.AddAddr("eth0", netip.PrefixFrom(otherAddr6, 64))
	// The node routes the IPv6 external and load-balancer IPs as it does
	// Service IPs (the IPv4 ones are inside ServiceCIDR4 already).
	for _, base := range []netip.Addr{externalPool6, lbPool6} {
		ns.AddRoute(netip.PrefixFrom(base, 64).Masked(), netip.Addr{}, "svc0")
	}
	for _, port := range echoPorts {
		c.StartEcho(port)
	}
	return c
}

// proxy is one proxy under comparison, running in its own namespace.
type proxy struct {
	name    string // "kube-proxy iptables", "svcproxy iptables", …
	cluster *netns.Cluster
	ns      *netns.NS
	proc    *netns.Proc
	log     *logBuffer
	// dump reads the rules the proxy wrote, one text per IP family.
	dump func(ns *netns.NS) (v4, v6 string, err error)
	// byAddress: the rules name no Service (the flat layout): a Service
	// shows in them by its cluster IPs.
	byAddress bool
}

// Settings both proxies are given.
var (
	clusterCIDRs = netns.PodCIDR4.String() + "," + netns.PodCIDR6.String()
	// nodePortCIDRs are the Node's addresses: ours serves node ports on
	// them (--node-ip), kube-proxy on the local addresses inside
	// --nodeport-addresses.
	nodePortCIDRs = netip.PrefixFrom(nodeAddr4, 32).String() + "," + netip.PrefixFrom(nodeAddr6, 128).String()
)

// startKubeProxy runs the real kube-proxy in mode ("iptables" or
// "nftables") in a namespace of its own.
func (w *world) startKubeProxy(mode string) *proxy {
	w.t.Helper()
	bin := apiserver.KubeProxy(w.t)
	c := w.proxyCluster()
	p := &proxy{name: "kube-proxy " + mode, cluster: c, ns: c.Node.NS, log: &logBuffer{}, dump: dumpFor(mode, "kube-proxy")}
	args := []string{
		"--kubeconfig=" + w.api.Kubeconfig(w.api.Token(apiserver.AdminUser)),
		"--hostname-override=" + nodeName,
		"--proxy-mode=" + mode,
		"--cluster-cidr=" + clusterCIDRs,
		// NodePorts on the Node's addresses only, as ours serves them.
		"--nodeport-addresses=" + nodePortCIDRs,
		"--metrics-bind-address=127.0.0.1:10249",
		"--healthz-bind-address=127.0.0.1:10256",
		// Leave the conntrack sysctls alone: some are not per namespace.
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--oom-score-adj=0",
		"--iptables-min-sync-period=100ms",
		"--v=2",
	}
	w.start(p, bin, args)
	return p
}

// startOurs runs our reference proxy of backend ("iptables" or
// "nftables", with extra flags such as the nftables layout) in a namespace
// of its own.
func (w *world) startOurs(backend string, extra ...string) *proxy {
	w.t.Helper()
	table := "kube-proxy"
	if strings.Contains(strings.Join(extra, " "), "flat") {
		table = "svcproxy-flat"
	}
	c := w.proxyCluster()
	p := &proxy{name: strings.Join(append([]string{"svcproxy", backend}, extra...), " "), cluster: c, ns: c.Node.NS, log: &logBuffer{},
		dump: dumpFor(backend, table), byAddress: table == "svcproxy-flat"}
	args := append([]string{
		"--kubeconfig", w.api.Kubeconfig(w.api.Token(apiserver.AdminUser)),
		"--node-name", nodeName,
		"--cluster-cidr", clusterCIDRs,
		"--ip-family", "dual",
		"--node-ip", nodeAddr4.String() + "," + nodeAddr6.String(),
		"--min-sync-period", "50ms",
		"--metrics-bind-address", "",
		"--healthz-bind-address", "127.0.0.1:10256",
	}, extra...)
	if backend == "iptables" {
		// kube-proxy serves NodePorts on 127.0.0.1 only when its
		// --nodeport-addresses include it, and they do not.
		args = append(args, "--iptables-localhost-nodeports=false")
	}
	w.start(p, proxies.Binary(w.t, backend), args)
	return p
}

// start runs bin in p's namespace; the Lab kills its process group by PID
// when the test ends.
func (w *world) start(p *proxy, bin string, args []string) {
	w.t.Helper()
	cmd := p.ns.Command(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	proc, err := p.ns.Start(cmd)
	if err != nil {
		w.t.Fatalf("starting %s: %v", p.name, err)
	}
	p.proc = proc
	w.proxies = append(w.proxies, p)
	w.t.Cleanup(func() {
		if err := proc.Stop(); err != nil {
			w.t.Errorf("stopping %s: %v", p.name, err)
		}
		if w.t.Failed() {
			w.t.Logf("%s output (end):\n%s", p.name, p.log.tail(80))
		}
	})
}

// dumpFor reads the rules of a backend: iptables-save and ip6tables-save,
// or the nftables table of that name in each family.
func dumpFor(backend, table string) func(ns *netns.NS) (string, string, error) {
	return func(ns *netns.NS) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var cmds [2][]string
		if backend == "iptables" {
			cmds = [2][]string{{"iptables-save"}, {"ip6tables-save"}}
		} else {
			cmds = [2][]string{{"nft", "list", "table", "ip", table}, {"nft", "list", "table", "ip6", table}}
		}
		var out [2]string
		for i, cmd := range cmds {
			text, err := ns.Run(ctx, cmd[0], cmd[1:]...)
			if err != nil {
				return "", "", fmt.Errorf("%s: %w", strings.Join(cmd, " "), err)
			}
			out[i] = withoutComments(text)
		}
		return out[0], out[1], nil
	}
}

// withoutComments drops the comment lines of iptables-save output (its
// header and footer carry the time).
func withoutComments(text string) string {
	lines := strings.Split(text, "\n")
	kept := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(l, "#") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

// rules is what a proxy holds in its kernel at one time.
type rules struct{ v4, v6 string }

// waitSynced waits until every proxy's rules show each of svcs (by name,
// "namespace/name", or by cluster IP) and name none of gone, and read the
// same in stablePolls polls in a row; it fails the test when a proxy
// exits, and returns an error (with every proxy's rules) after
// syncTimeout.
func (w *world) waitSynced(svcs []*v1.Service, gone []string) (map[*proxy]rules, error) {
	w.t.Helper()
	deadline := time.Now().Add(syncTimeout)
	last := map[*proxy]rules{}
	stable := 0
	for {
		cur := map[*proxy]rules{}
		var problem string
		for _, p := range w.proxies {
			select {
			case <-p.proc.Done():
				w.t.Fatalf("%s exited (%v):\n%s", p.name, p.proc.Err(), p.log.tail(80))
			default:
			}
			v4, v6, err := p.dump(p.ns)
			if err != nil {
				problem = fmt.Sprintf("%s: %v", p.name, err)
				break
			}
			cur[p] = rules{v4, v6}
			if problem == "" {
				problem = missing(p, v4+v6, svcs, gone)
			}
		}
		if problem == "" && equalRules(cur, last) {
			stable++
		} else {
			stable = 0
		}
		if stable >= stablePolls-1 {
			return cur, nil
		}
		last = cur
		if time.Now().After(deadline) {
			var all strings.Builder
			for p, r := range cur {
				fmt.Fprintf(&all, "%s:\n%s\n%s\n", p.name, r.v4, r.v6)
			}
			return nil, fmt.Errorf("proxies did not sync within %v: %s\n%s", syncTimeout, problem, all.String())
		}
		time.Sleep(pollInterval)
	}
}

// missing says which of svcs p's rules (text) do not show yet, or which of
// gone they still name.
func missing(p *proxy, text string, svcs []*v1.Service, gone []string) string {
	for _, svc := range svcs {
		if svc.Spec.ClusterIP == v1.ClusterIPNone {
			continue
		}
		if p.byAddress {
			for _, ip := range svc.Spec.ClusterIPs {
				if !strings.Contains(text, ip) {
					return fmt.Sprintf("%s has no rule for %s (%s) yet", p.name, svc.Name, ip)
				}
			}
			continue
		}
		name := svc.Namespace + "/" + svc.Name
		if !slices.ContainsFunc([]string{":", " ", `"`, "/"}, func(end string) bool { return strings.Contains(text, name+end) }) {
			return fmt.Sprintf("%s has no rule for %s yet", p.name, name)
		}
	}
	if p.byAddress {
		return ""
	}
	// kube-proxy's nftables mode keeps an element whose key and value a
	// later Service writes again with the earlier Service's comment.
	text = nftComment.ReplaceAllString(text, "$1")
	for _, name := range gone {
		// Not "name/": kube-proxy's nftables mode deletes the chains of a
		// gone Service ("service-HASH-namespace/name/…") a while after no
		// rule jumps to them.
		for _, end := range []string{":", " ", `"`} {
			if i := strings.Index(text, name+end); i >= 0 {
				start := strings.LastIndex(text[:i], "\n") + 1
				line, _, _ := strings.Cut(text[start:], "\n")
				return fmt.Sprintf("%s still has rules for %s: %s", p.name, name, strings.TrimSpace(line))
			}
		}
	}
	return ""
}

// nftComment is an nft element's or rule's comment (not iptables'
// --comment).
var nftComment = regexp.MustCompile(`(^|[^-])comment "[^"]*"`)

func equalRules(a, b map[*proxy]rules) bool {
	if len(a) != len(b) {
		return false
	}
	for p, r := range a {
		if b[p] != r {
			return false
		}
	}
	return true
}

// put creates or updates obj with server-side apply and returns the
// object as the API server stored it.
func (w *world) put(obj any) any {
	w.t.Helper()
	got, err := apply(w.client, obj, "")
	if err != nil {
		w.t.Fatal(err)
	}
	return got
}

// apply server-side-applies obj (or its subresource, "status"), with its
// TypeMeta set.
func apply(client kubernetes.Interface, obj any, subresource string) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	force := true
	po := metav1.PatchOptions{FieldManager: "svcproxy-diff", Force: &force}
	var sub []string
	if subresource != "" {
		sub = []string{subresource}
	}
	var got any
	switch o := obj.(type) {
	case *v1.Namespace:
		got, err = client.CoreV1().Namespaces().Patch(ctx, o.Name, types.ApplyPatchType, data, po, sub...)
	case *v1.Node:
		got, err = client.CoreV1().Nodes().Patch(ctx, o.Name, types.ApplyPatchType, data, po, sub...)
	case *v1.Service:
		got, err = client.CoreV1().Services(o.Namespace).Patch(ctx, o.Name, types.ApplyPatchType, data, po, sub...)
	case *discovery.EndpointSlice:
		got, err = client.DiscoveryV1().EndpointSlices(o.Namespace).Patch(ctx, o.Name, types.ApplyPatchType, data, po, sub...)
	case *networking.ServiceCIDR:
		got, err = client.NetworkingV1().ServiceCIDRs().Patch(ctx, o.Name, types.ApplyPatchType, data, po, sub...)
	default:
		return nil, fmt.Errorf("apply: unexpected %T", obj)
	}
	if err != nil {
		js, _ := json.Marshal(obj)
		return nil, fmt.Errorf("applying %T %s: %w", obj, js, err)
	}
	return got, nil
}

// deleteAll deletes the test Namespace's Services and EndpointSlices.
func (w *world) deleteAll() {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	svcs, err := w.client.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	for _, s := range svcs.Items {
		if err := w.client.CoreV1().Services(namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			w.t.Fatal(err)
		}
	}
	for _, ns := range []string{namespace, otherNamespace} {
		if err := w.client.DiscoveryV1().EndpointSlices(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			w.t.Fatal(err)
		}
	}
}

// proxies are the reference proxies this test binary built.
var proxies = proxybin.New("svcproxy-diff-")

func TestMain(m *testing.M) {
	code := m.Run()
	if err := proxies.Remove(); err != nil {
		fmt.Fprintf(os.Stderr, "differential: %v\n", err)
	}
	if left, err := netns.Leftovers(); err == nil && len(left) > 0 {
		fmt.Fprintf(os.Stderr, "differential: namespaces left behind: %v\n", left)
		code = 1
	}
	os.Exit(code)
}

// logBuffer collects a process's output safely.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// tail is the last n lines written.
func (l *logBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(l.buf.String(), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
