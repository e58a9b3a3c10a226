//go:build linux

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/proxybin"
)

// backends are the reference proxies under test, by /proxyMode name, and
// "nftables-flat": the nftables proxy with --nftables-layout flat.
var backends = []string{"iptables", "nftables", "nftables-flat", "ebpf"}

// nftablesBackends are the backends of the nftables proxy.
var nftablesBackends = []string{"nftables", "nftables-flat"}

// proxyName is the reference proxy that runs a backend: iptables or
// nftables.
func proxyName(backend string) string {
	if backend == "nftables-flat" {
		return "nftables"
	}
	return backend
}

// layoutArgs are the flags that select a backend's layout, if any.
func layoutArgs(backend string) []string {
	if backend == "nftables-flat" {
		return []string{"--nftables-layout", "flat"}
	}
	return nil
}

// proxies are the reference proxies this test binary built.
var proxies = proxybin.New("svcproxy-e2e-")

func TestMain(m *testing.M) {
	if os.Getenv(ebpfClientEnv) != "" {
		os.Exit(runSocketClient())
	}
	before := hostRules()
	code := m.Run()
	if err := proxies.Remove(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
	}
	if left, err := netns.Leftovers(); err == nil && len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: namespaces left behind: %v\n", left)
		code = 1
	}
	if left := ebpfLeftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: ebpf cgroups or bpffs directories left behind: %v\n", left)
		code = 1
	}
	if after := hostRules(); after != before {
		fmt.Fprintf(os.Stderr, "e2e: the host namespace's rules changed during the run:\nbefore:\n%s\nafter:\n%s\n", before, after)
		code = 1
	}
	os.Exit(code)
}

// hostRules reads (never changes) the host namespace's firewall, to prove
// that the suite left it alone. Tools that are missing read as empty.
func hostRules() string {
	var out strings.Builder
	for _, cmd := range [][]string{{"iptables-save"}, {"ip6tables-save"}, {"nft", "list", "ruleset"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		text, _ := exec.CommandContext(ctx, cmd[0], cmd[1:]...).Output()
		cancel()
		fmt.Fprintf(&out, "# %s\n%s", strings.Join(cmd, " "), text)
	}
	return rulesOnly(out.String())
}

// proxyBinary builds the reference proxy of a backend once and returns its
// path.
func proxyBinary(t *testing.T, backend string) string {
	t.Helper()
	return proxies.Binary(t, proxyName(backend))
}

// forEachBackend runs test as a subtest for each reference proxy.
func forEachBackend(t *testing.T, test func(t *testing.T, backend string)) {
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			if why, ok := ebpfSkips[strings.SplitN(t.Name(), "/", 2)[0]]; ok && b == "ebpf" {
				t.Skip("not for ebpf: " + why)
			}
			test(t, b)
		})
	}
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

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// proxy is a reference proxy running in a cluster's node namespace.
type proxy struct {
	t       *testing.T
	backend string
	node    *netns.Host
	dir     string
	proc    *netns.Proc
	log     *logBuffer
	// nodeObj is the proxy's Node in the manifests.
	nodeObj *v1.Node
	// cgroup, pinPath and socketClients are the ebpf backend's (see
	// ebpfSetup and inside).
	cgroup, pinPath string
	socketClients   map[*netns.Host]*socketClient
}

const nodeName = "node-a"

// nodeObject is the proxy's Node, in zone-a.
func nodeObject() *v1.Node {
	return &v1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{v1.LabelTopologyZone: "zone-a"}},
	}
}

// startProxy writes objs as manifests and runs the backend's proxy on the
// cluster's node, for IPv4 and IPv6, and waits for its first sync.
func startProxy(t *testing.T, c *netns.Cluster, backend string, objs ...any) *proxy {
	t.Helper()
	return startProxyWith(t, c, backend, proxySetup{}, objs...)
}

// proxySetup changes what startProxyWith gives the proxy.
type proxySetup struct {
	// node replaces nodeObject() in the manifests when set.
	node *v1.Node
	// noNodeIP leaves --node-ip out: --nodeport-addresses in args, or
	// the backend's default, decides.
	noNodeIP bool
	// args are added to the command line.
	args []string
	// kubeconfig, when set, makes the proxy watch that API server instead
	// of reading manifests (objs and node are then not used).
	kubeconfig string
	// noWait returns as soon as the proxy runs, without waiting for its
	// first sync.
	noWait bool
}

// startProxyWith is startProxy with the changes of setup.
func startProxyWith(t *testing.T, c *netns.Cluster, backend string, setup proxySetup, objs ...any) *proxy {
	t.Helper()
	p := &proxy{t: t, backend: backend, node: c.Node, dir: t.TempDir(), log: &logBuffer{}, nodeObj: setup.node}
	if p.nodeObj == nil {
		p.nodeObj = nodeObject()
	}
	source := []string{"--kubeconfig", setup.kubeconfig}
	if setup.kubeconfig == "" {
		p.write(objs...)
		source = []string{"--manifests", p.dir}
	}
	args := append(source,
		"--node-name", nodeName,
		"--cluster-cidr", netns.PodCIDR4.String()+","+netns.PodCIDR6.String(),
		"--ip-family", "dual",
		"--min-sync-period", "50ms",
		"--metrics-bind-address", "",
		"--healthz-bind-address", netip.AddrPortFrom(c.Node.IPv4, 10256).String(),
	)
	if !setup.noNodeIP {
		args = append(args, "--node-ip", c.Node.IPv4.String()+","+c.Node.IPv6.String())
	}
	args = append(append(args, layoutArgs(backend)...), setup.args...)
	var extra []*os.File
	if backend == "ebpf" {
		ebpfArgs, cg := ebpfSetup(t, c, p)
		args, extra = append(args, ebpfArgs...), []*os.File{cg}
	}
	cmd := c.Node.Command(context.Background(), proxyBinary(t, backend), args...)
	cmd.ExtraFiles = extra
	cmd.Stdout, cmd.Stderr = p.log, p.log
	proc, err := c.Node.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	p.proc = proc
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s-proxy output:\n%s", backend, p.log.String())
			t.Logf("kernel state of the node:\n%s", p.kernelState())
		}
	})
	if !setup.noWait {
		p.waitSyncs(1)
	}
	return p
}

// kernelState is the node's rules, as an operator would read them.
func (p *proxy) kernelState() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if p.backend == "ebpf" {
		return p.ebpfState()
	}
	var out strings.Builder
	for _, cmd := range [][]string{{"iptables-save"}, {"ip6tables-save"}, {"nft", "list", "ruleset"}} {
		text, err := p.node.Run(ctx, cmd[0], cmd[1:]...)
		fmt.Fprintf(&out, "# %s (err %v)\n%s\n", strings.Join(cmd, " "), err, text)
	}
	return out.String()
}

// syncs counts the proxy's successful syncs so far.
func (p *proxy) syncs() int { return strings.Count(p.log.String(), "msg=synced") }

// waitSyncs waits, at most 20 s, until the proxy has synced n times.
func (p *proxy) waitSyncs(n int) {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for p.syncs() < n {
		select {
		case <-p.proc.Done():
			p.t.Fatalf("%s-proxy exited (%v) before sync %d:\n%s", p.backend, p.proc.Err(), n, p.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s-proxy did not complete sync %d within 20s:\n%s", p.backend, n, p.log.String())
		}
	}
}

// update replaces the manifests with objs and waits for the proxy to sync
// them: for a reload of the manifests, then for a sync of a state that
// holds it (a sync under way when they were reloaded does not count).
func (p *proxy) update(objs ...any) {
	p.t.Helper()
	before := lastNumber(p.log.String(), reloadedLine)
	p.write(objs...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		log := p.log.String()
		if reload := lastNumber(log, reloadedLine); reload > before && lastNumber(log, syncedLine) >= reload {
			return
		}
		select {
		case <-p.proc.Done():
			p.t.Fatalf("%s-proxy exited (%v) before syncing the update:\n%s", p.backend, p.proc.Err(), log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s-proxy did not reload and sync the update within 20s:\n%s", p.backend, log)
		}
	}
}

// The proxies number their manifest reloads, and say in each synced line
// which reload the state it applied holds.
var (
	reloadedLine = regexp.MustCompile(`msg="manifests reloaded".* manifestReload=(\d+)`)
	syncedLine   = regexp.MustCompile(`msg=synced .*manifestReload=(\d+)`)
)

// lastNumber is the number that re captures in the last of log's lines it
// matches; -1 when none does.
func lastNumber(log string, re *regexp.Regexp) int {
	n := -1
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		n, _ = strconv.Atoi(m[1])
	}
	return n
}

// write replaces the manifests atomically.
func (p *proxy) write(objs ...any) {
	p.t.Helper()
	var docs []string
	for _, o := range append([]any{p.nodeObj}, objs...) {
		data, err := yaml.Marshal(o)
		if err != nil {
			p.t.Fatal(err)
		}
		docs = append(docs, string(data))
	}
	writeFile(p.t, filepath.Join(p.dir, "objects.yaml"), strings.Join(docs, "---\n"))
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// cleanup runs the backend's proxy with --cleanup in the node namespace.
func (p *proxy) cleanup() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cleanup"}, layoutArgs(p.backend)...)
	if p.backend == "ebpf" {
		args = append(args, "--bpf-pin-path", p.pinPath)
	}
	if out, err := p.node.Run(ctx, proxyBinary(p.t, p.backend), args...); err != nil {
		p.t.Fatalf("%s-proxy --cleanup: %v\n%s", p.backend, err, out)
	}
}

// Objects.

type serviceOpt func(*v1.Service)

// service is a ClusterIP Service with one TCP port "p" (80) and the given
// cluster IPs (one per family).
func service(name string, clusterIPs []netip.Addr, opts ...serviceOpt) *v1.Service {
	svc := &v1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "e2e", Name: name},
		Spec: v1.ServiceSpec{
			Type:  v1.ServiceTypeClusterIP,
			Ports: []v1.ServicePort{{Name: "p", Port: 80, Protocol: v1.ProtocolTCP}},
		},
	}
	for _, ip := range clusterIPs {
		svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, ip.String())
	}
	svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
	for _, o := range opts {
		o(svc)
	}
	return svc
}

func withProtocol(p v1.Protocol) serviceOpt {
	return func(s *v1.Service) { s.Spec.Ports[0].Protocol = p }
}

func withNodePort(port int32, externalLocal bool) serviceOpt {
	return func(s *v1.Service) {
		if s.Spec.Type != v1.ServiceTypeLoadBalancer {
			s.Spec.Type = v1.ServiceTypeNodePort
		}
		s.Spec.Ports[0].NodePort = port
		if externalLocal {
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		}
	}
}

func withLoadBalancer(ip netip.Addr, sourceRanges []string, healthCheckNodePort int32) serviceOpt {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerSourceRanges = sourceRanges
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip.String()}}
		if healthCheckNodePort != 0 {
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = healthCheckNodePort
		}
	}
}

func withExternalIPs(ips ...netip.Addr) serviceOpt {
	return func(s *v1.Service) {
		for _, ip := range ips {
			s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, ip.String())
		}
	}
}

func withInternalLocal() serviceOpt {
	return func(s *v1.Service) {
		local := v1.ServiceInternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = &local
	}
}

func withAffinity(seconds int32) serviceOpt {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &seconds}}
	}
}

func withTrafficDistribution(td string) serviceOpt {
	return func(s *v1.Service) { s.Spec.TrafficDistribution = &td }
}

// endpoint is one pod behind a Service.
type endpoint struct {
	pod         *netns.Host
	node        string
	zone        string
	ready       bool
	serving     bool
	terminating bool
}

// ready is a ready endpoint for pod, on node-a when the pod hangs off the
// cluster's node, else on node-b.
func ready(c *netns.Cluster, pod *netns.Host) endpoint {
	node, zone := nodeName, "zone-a"
	if pod.Node != c.Node {
		node, zone = "node-b", "zone-b"
	}
	return endpoint{pod: pod, node: node, zone: zone, ready: true, serving: true}
}

func (e endpoint) terminatingServing() endpoint {
	e.ready, e.serving, e.terminating = false, true, true
	return e
}

func (e endpoint) notReady() endpoint {
	e.ready, e.serving = false, false
	return e
}

func (e endpoint) inZone(zone string) endpoint {
	e.zone = zone
	return e
}

// slice is the EndpointSlice of one family for service, port "p" at
// echoPort with the given protocol.
func slice(service string, ipv6 bool, protocol v1.Protocol, eps ...endpoint) *discovery.EndpointSlice {
	family, suffix := discovery.AddressTypeIPv4, "v4"
	if ipv6 {
		family, suffix = discovery.AddressTypeIPv6, "v6"
	}
	name, port := "p", int32(echoPort)
	es := &discovery.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "e2e", Name: service + "-" + suffix,
			Labels: map[string]string{discovery.LabelServiceName: service}},
		AddressType: family,
		Ports:       []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &protocol}},
	}
	for _, e := range eps {
		ready, serving, terminating, node, zone := e.ready, e.serving, e.terminating, e.node, e.zone
		es.Endpoints = append(es.Endpoints, discovery.Endpoint{
			Addresses:  []string{e.pod.IP(ipv6).String()},
			Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			NodeName:   &node,
			Zone:       &zone,
		})
	}
	return es
}

// echoPort is where every pod's echo server listens.
const echoPort = 8080

// Traffic.

// dialer is anything that can open a TCP connection or send a UDP
// datagram: a client, a pod, the node.
type dialer interface {
	TCP(remote netip.AddrPort, timeout time.Duration) (netns.Reply, error)
	UDP(remote netip.AddrPort, timeout time.Duration) (netns.Reply, error)
}

const (
	connectTimeout = 2 * time.Second
	// dropTimeout is how long a connection that should be dropped is given
	// before it counts as dropped.
	dropTimeout = 700 * time.Millisecond
)

// spread opens n TCP connections from d to addr and counts, per pod, the
// connections it answered. Any failed connection fails the test.
func spread(t *testing.T, d dialer, addr netip.AddrPort, n int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for i := range n {
		r, err := d.TCP(addr, connectTimeout)
		if err != nil {
			t.Fatalf("connection %d of %d to %s: %v (reached so far: %v)", i+1, n, addr, err, counts)
		}
		counts[r.Identity]++
	}
	return counts
}

// reach opens one TCP connection and returns the reply, failing the test on
// error.
func reach(t *testing.T, d dialer, addr netip.AddrPort) netns.Reply {
	t.Helper()
	r, err := d.TCP(addr, connectTimeout)
	if err != nil {
		t.Fatalf("connection to %s: %v", addr, err)
	}
	return r
}

// expectRefused checks that a TCP connection to addr is refused at once.
func expectRefused(t *testing.T, d dialer, addr netip.AddrPort) {
	t.Helper()
	start := time.Now()
	r, err := d.TCP(addr, connectTimeout)
	if !errors.Is(err, netns.ErrRefused) {
		t.Fatalf("connection to %s: got reply %+v, error %v; want refused", addr, r, err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("connection to %s refused only after %v, want at once", addr, d)
	}
}

// expectDropped checks that a TCP connection to addr reaches no pod: it
// times out.
func expectDropped(t *testing.T, d dialer, addr netip.AddrPort) {
	t.Helper()
	r, err := d.TCP(addr, dropTimeout)
	if !errors.Is(err, netns.ErrTimeout) {
		t.Fatalf("connection to %s: got reply %+v, error %v; want it dropped (timeout)", addr, r, err)
	}
}

// expectDropped checks what becomes of a flow from d that kube-proxy
// drops: it times out, except on the ebpf backend's socket path (d from
// p.inside), where a socket cannot be left to time out and connect()
// fails at once with EHOSTUNREACH.
func (p *proxy) expectDropped(d dialer, addr netip.AddrPort) {
	p.t.Helper()
	if _, ok := d.(*socketClient); !ok {
		expectDropped(p.t, d, addr)
		return
	}
	start := time.Now()
	r, err := d.TCP(addr, connectTimeout)
	if !errors.Is(err, netns.ErrUnreachable) {
		p.t.Fatalf("connection to %s: got reply %+v, error %v; want EHOSTUNREACH", addr, r, err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		p.t.Errorf("connection to %s failed only after %v, want at once", addr, d)
	}
}

// dropError is the error a flow from d that kube-proxy drops ends in:
// ErrTimeout, or ErrUnreachable on the ebpf backend's socket path (see
// expectDropped).
func (p *proxy) dropError(d dialer) error {
	if _, ok := d.(*socketClient); ok {
		return netns.ErrUnreachable
	}
	return netns.ErrTimeout
}

// expectOnly checks that the connections reached exactly the pods named.
func expectOnly(t *testing.T, counts map[string]int, pods ...*netns.Host) {
	t.Helper()
	var want, got []string
	for _, p := range pods {
		want = append(want, p.Label)
	}
	for id := range counts {
		got = append(got, id)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("connections reached %v, want exactly %v", counts, want)
	}
}

// expectUniform checks that every pod got traffic and that a chi-square
// test at the 10⁻⁵ level does not reject a uniform spread. The suite makes
// some thirty such checks a run; at 10⁻⁵ a correct proxy fails one of them
// about once in three thousand runs (at 10⁻³ it did, here, once in thirty),
// while a spread as skewed as 1:3 over 90 connections still fails.
func expectUniform(t *testing.T, counts map[string]int, pods ...*netns.Host) {
	t.Helper()
	expectOnly(t, counts, pods...)
	total := 0
	for _, n := range counts {
		total += n
	}
	expected := float64(total) / float64(len(pods))
	chi2 := 0.0
	for _, n := range counts {
		d := float64(n) - expected
		chi2 += d * d / expected
	}
	// Critical values of chi-square at p = 10⁻⁵ by degrees of freedom.
	critical := []float64{math.Inf(1), 19.51, 23.03, 25.90, 28.47, 30.86}
	if df := len(pods) - 1; df < len(critical) && chi2 > critical[df] {
		t.Errorf("spread %v is not uniform: chi-square %.2f > %.2f (df %d, p=1e-5)", counts, chi2, critical[df], df)
	}
}

// Addresses.

func serviceIP(ipv6 bool, n byte) netip.Addr {
	if ipv6 {
		return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0x19, 15: n})
	}
	return netip.AddrFrom4([4]byte{198, 19, 0, n})
}

// ips is the cluster IPs of Service n in both families.
func ips(n byte) []netip.Addr { return []netip.Addr{serviceIP(false, n), serviceIP(true, n)} }

func at(addr netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(addr, port) }
