//go:build linux

package ebpf_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/internal/testkit/cgroup"
	"github.com/svcproxy/svcproxy/internal/testkit/fixture"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/topology"
)

// clientEnv makes the test binary a client (runClient) instead of running
// the tests: the kernel tests start it inside their child cgroup.
const clientEnv = "SVCPROXY_EBPF_CLIENT"

func TestMain(m *testing.M) {
	if req := os.Getenv(clientEnv); req != "" {
		os.Exit(runClient(req))
	}
	code := m.Run()
	if left, err := netns.Sweep(); err != nil || len(left) > 0 {
		fmt.Fprintf(os.Stderr, "ebpf: namespaces left behind and swept: %v %v\n", left, err)
		code = 1
	}
	os.Exit(code)
}

// request is what a client does: Count attempts of Op ("tcp", "udp":
// unconnected sendto/recvfrom, "udpconn": connected) to Dst, on a socket
// of Network ("tcp", "tcp4", "udp", "udp6", …), Pause between them.
type request struct {
	Op      string
	Network string
	Dst     string
	Count   int
	Pause   time.Duration
	// Direct is, for connectbench, the address to compare Dst with.
	Direct string
}

// attempt is the outcome of one attempt: the identity of the pod that
// answered, the peer as the socket reports it (getpeername, or recvfrom's
// source), or the errno of the failure.
type attempt struct {
	Identity string
	Peer     string
	Errno    string
}

// runClient runs the request in req (JSON) and prints one attempt per
// line (JSON); each attempt is bounded by 2 s.
func runClient(req string) int {
	var r request
	if err := json.Unmarshal([]byte(req), &r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	enc := json.NewEncoder(os.Stdout)
	switch r.Op {
	case "udphold":
		holdUDP(r, enc)
		return 0
	case "connectbench":
		enc.Encode(connectBench(r))
		return 0
	}
	for i := range min(r.Count, 200) {
		if i > 0 {
			time.Sleep(r.Pause)
		}
		enc.Encode(once(r))
	}
	return 0
}

func errnoOf(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unixName(errno)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return err.Error()
}

func unixName(e syscall.Errno) string {
	switch e {
	case syscall.ECONNREFUSED:
		return "ECONNREFUSED"
	case syscall.EHOSTUNREACH:
		return "EHOSTUNREACH"
	case syscall.EPERM:
		return "EPERM"
	case syscall.ECONNABORTED:
		return "ECONNABORTED"
	case syscall.EDESTADDRREQ:
		return "EDESTADDRREQ"
	}
	return e.Error()
}

// identity reads the pod's identity from an echo line
// ("svcproxy-echo <identity> <source>").
func identity(line string) string {
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "svcproxy-echo" {
		return "?" + line
	}
	return f[1]
}

func once(r request) attempt {
	deadline := time.Now().Add(2 * time.Second)
	switch r.Op {
	case "tcp":
		c, err := net.DialTimeout(r.Network, r.Dst, 2*time.Second)
		if err != nil {
			return attempt{Errno: errnoOf(err)}
		}
		defer c.Close()
		c.SetDeadline(deadline)
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return attempt{Errno: errnoOf(err)}
		}
		return attempt{Identity: identity(line), Peer: c.RemoteAddr().String()}
	case "udp":
		c, err := net.ListenUDP(r.Network, nil)
		if err != nil {
			return attempt{Errno: errnoOf(err)}
		}
		defer c.Close()
		c.SetDeadline(deadline)
		dst, err := net.ResolveUDPAddr(r.Network, r.Dst)
		if err != nil {
			return attempt{Errno: err.Error()}
		}
		if _, err := c.WriteToUDP([]byte("hello"), dst); err != nil {
			return attempt{Errno: errnoOf(err)}
		}
		buf := make([]byte, 512)
		n, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return attempt{Errno: errnoOf(err)}
		}
		return attempt{Identity: identity(string(buf[:n])), Peer: from.String()}
	case "udpconn":
		c, err := net.Dial(r.Network, r.Dst)
		if err != nil {
			return attempt{Errno: errnoOf(err)}
		}
		defer c.Close()
		c.SetDeadline(deadline)
		if _, err := c.Write([]byte("hello")); err != nil {
			return attempt{Errno: errnoOf(err)}
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			return attempt{Errno: errnoOf(err)}
		}
		return attempt{Identity: identity(string(buf[:n])), Peer: c.RemoteAddr().String()}
	}
	return attempt{Errno: "unknown op " + r.Op}
}

// holdUDP connects a UDP socket to r.Dst and makes one exchange on it
// each time a line arrives on stdin (at most r.Count, each within 20 s of
// the last), printing each attempt.
func holdUDP(r request, enc *json.Encoder) {
	c, err := net.Dial(r.Network, r.Dst)
	if err != nil {
		enc.Encode(attempt{Errno: errnoOf(err)})
		return
	}
	defer c.Close()
	lines := bufio.NewScanner(os.Stdin)
	for i := range min(r.Count, 10) {
		if i > 0 {
			done := make(chan bool, 1)
			go func() { done <- lines.Scan() }()
			select {
			case ok := <-done:
				if !ok {
					return
				}
			case <-time.After(20 * time.Second):
				return
			}
		}
		c.SetDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 512)
		var n int
		if _, err = c.Write([]byte("hello")); err == nil {
			n, err = c.Read(buf)
		}
		if err != nil {
			enc.Encode(attempt{Errno: errnoOf(err)})
			continue
		}
		enc.Encode(attempt{Identity: identity(string(buf[:n])), Peer: c.RemoteAddr().String()})
	}
}

// connectBench times r.Count connect() calls of UDP sockets of r.Network
// to r.Dst and as many to r.Direct, alternating, and returns the median
// of each, in nanoseconds, as Identity "SERVICE DIRECT".
func connectBench(r request) attempt {
	var times [2][]time.Duration
	for i := range 2 * r.Count {
		dst := [2]string{r.Dst, r.Direct}[i%2]
		ap := netip.MustParseAddrPort(dst)
		var fam int
		var sa syscall.Sockaddr
		if ap.Addr().Is4() {
			fam, sa = syscall.AF_INET, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
		} else {
			fam, sa = syscall.AF_INET6, &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
		}
		fd, err := syscall.Socket(fam, syscall.SOCK_DGRAM, 0)
		if err != nil {
			return attempt{Errno: errnoOf(err)}
		}
		start := time.Now()
		err = syscall.Connect(fd, sa)
		d := time.Since(start)
		syscall.Close(fd)
		if err != nil {
			return attempt{Errno: dst + ": " + errnoOf(err)}
		}
		times[i%2] = append(times[i%2], d)
	}
	med := func(ds []time.Duration) int64 {
		slices.Sort(ds)
		return int64(ds[len(ds)/2])
	}
	return attempt{Identity: fmt.Sprintf("%d %d", med(times[0]), med(times[1]))}
}

// newCgroup creates a child cgroup of the cgroup v2 root, removed when the
// test ends (its processes have ended by then: every client is waited for).
func newCgroup(t *testing.T) string {
	t.Helper()
	return cgroup.New(t, "svcp-ebpf-test")
}

func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv(netns.EnvRequired) == "required" {
		t.Fatalf("ebpf kernel test: %s (%s=required)", why, netns.EnvRequired)
	}
	t.Skipf("ebpf kernel test: %s; skipping", why)
}

// lab is a cluster (netns.NewCluster: pods on the node, echo servers on
// port 8080) with the programs attached to a child cgroup, in which the
// clients run in the node's namespace.
type lab struct {
	t       *testing.T
	c       *netns.Cluster
	cgroup  string
	dp      *ebpf.Dataplane
	backend map[v1.IPFamily]*ebpf.Executor
}

func newLab(t *testing.T, pods int) *lab {
	t.Helper()
	c := netns.NewCluster(t, netns.ClusterSpec{Pods: pods}) // calls netns.Require
	c.StartEcho(8080)
	cg := newCgroup(t)
	// The clients' UDP sockets live in the node's namespace.
	dp := ebpf.NewDataplane(ebpf.Config{Cgroup: cg, SocketNamespaces: []string{"/var/run/netns/" + c.Node.Name}})
	t.Cleanup(func() {
		if err := dp.Cleanup(); err != nil {
			t.Error(err)
		}
	})
	return &lab{t: t, c: c, cgroup: cg, dp: dp, backend: map[v1.IPFamily]*ebpf.Executor{
		v1.IPv4Protocol: dp.Executor(v1.IPv4Protocol), v1.IPv6Protocol: dp.Executor(v1.IPv6Protocol)}}
}

// sync builds the Ruleset of objs for family on node-a and syncs it.
func (l *lab) sync(family v1.IPFamily, objs ...any) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.backend[family].Sync(ctx, buildRuleset(l.t, l, objs...)); err != nil {
		l.t.Fatal(err)
	}
}

// buildRuleset builds the Ruleset of objs on node-a, of the family of the
// first Service, serving node ports on the node's address.
func buildRuleset(t *testing.T, l *lab, objs ...any) *ruleset.Ruleset {
	t.Helper()
	family := objs[0].(*v1.Service).Spec.IPFamilies[0]
	cfg := ruleset.Config{Family: family, Node: topology.Node{Name: "node-a"}, NodePortAddresses: []netip.Addr{l.c.Node.IP(family == v1.IPv6Protocol)}}
	if family == v1.IPv4Protocol {
		cfg.ServiceCIDRs = []netip.Prefix{netns.ServiceCIDR4}
	} else {
		cfg.ServiceCIDRs = []netip.Prefix{netns.ServiceCIDR6}
	}
	return fixture.Ruleset(t, cfg, objs...)
}

// attachedPrograms are the IDs of the programs attached to cgroup, of
// every attach type the Dataplane uses.
func attachedPrograms(t *testing.T, cgroup string) []cebpf.ProgramID {
	t.Helper()
	f, err := os.Open(cgroup)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ids []cebpf.ProgramID
	for _, at := range []cebpf.AttachType{cebpf.AttachCGroupInet4Connect, cebpf.AttachCGroupInet6Connect, cebpf.AttachCGroupUDP4Sendmsg,
		cebpf.AttachCGroupUDP6Sendmsg, cebpf.AttachCGroupUDP4Recvmsg, cebpf.AttachCGroupUDP6Recvmsg,
		cebpf.AttachCgroupInet4GetPeername, cebpf.AttachCgroupInet6GetPeername} {
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: at})
		if err != nil {
			t.Fatalf("querying %v on %s: %v", at, cgroup, err)
		}
		for _, p := range res.Programs {
			ids = append(ids, p.ID)
		}
	}
	return ids
}

func equalIDs(a, b []cebpf.ProgramID) bool { return slices.Equal(a, b) }

// deleteService deletes one element of the services map that the programs
// attached to the lab's cgroup use, behind the executor's back.
func deleteService(t *testing.T, l *lab) {
	t.Helper()
	ids := attachedPrograms(t, l.cgroup)
	if len(ids) == 0 {
		t.Fatal("no program attached")
	}
	prog, err := cebpf.NewProgramFromID(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	mapIDs, _ := info.MapIDs()
	for _, id := range mapIDs {
		m, err := cebpf.NewMapFromID(id)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		mi, err := m.Info()
		if err != nil || mi.Name != "svcp_services" {
			continue
		}
		var k ebpf.ServiceKey
		var v ebpf.ServiceValue
		if !m.Iterate().Next(&k, &v) {
			t.Fatal("services map is empty")
		}
		if err := m.Delete(k); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("no services map found")
}

// run runs a client in the node's namespace, in the lab's cgroup, and
// returns its attempts.
func (l *lab) run(r request) []attempt {
	l.t.Helper()
	if r.Count == 0 {
		r.Count = 1
	}
	req, _ := json.Marshal(r)
	cg, err := os.Open(l.cgroup)
	if err != nil {
		l.t.Fatal(err)
	}
	defer cg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.Count)*(2*time.Second+r.Pause)+10*time.Second)
	defer cancel()
	cmd := l.c.Node.Command(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), clientEnv+"="+string(req))
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		l.t.Fatalf("client %s: %v: %s", req, err, stderr.String())
	}
	var as []attempt
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var a attempt
		if err := dec.Decode(&a); err != nil {
			l.t.Fatalf("client output %q: %v", out, err)
		}
		as = append(as, a)
	}
	if want := map[bool]int{true: 1, false: r.Count}[r.Op == "connectbench"]; len(as) != want {
		l.t.Fatalf("client %s: %d attempts of %d: %s", req, len(as), r.Count, stderr.String())
	}
	return as
}

// hold is a running udphold client.
type hold struct {
	t     *testing.T
	stdin io.WriteCloser
	out   *json.Decoder
	wait  func() error
}

// start starts a udphold client (see holdUDP) in the node's namespace and
// the lab's cgroup; it is killed by the lab's cleanup if still running.
func (l *lab) start(r request) *hold {
	l.t.Helper()
	req, _ := json.Marshal(r)
	cg, err := os.Open(l.cgroup)
	if err != nil {
		l.t.Fatal(err)
	}
	defer cg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	l.t.Cleanup(cancel)
	cmd := l.c.Node.Command(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), clientEnv+"="+string(req))
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	h := &hold{t: l.t, stdin: stdin, out: json.NewDecoder(stdout), wait: cmd.Wait}
	l.t.Cleanup(func() { stdin.Close(); cancel(); cmd.Wait() })
	return h
}

// next asks the client for its next exchange (none for the first) and
// returns it.
func (h *hold) next(first bool) attempt {
	h.t.Helper()
	if !first {
		if _, err := io.WriteString(h.stdin, "\n"); err != nil {
			h.t.Fatal(err)
		}
	}
	var a attempt
	if err := h.out.Decode(&a); err != nil {
		h.t.Fatalf("udphold client: %v", err)
	}
	return a
}

// service is a Service ns/name with one port 80 (protocol proto) to 8080,
// of the family of clusterIP, changed by mods.
func service(name, clusterIP string, proto v1.Protocol, mods ...func(*v1.Service)) *v1.Service {
	family := v1.IPv4Protocol
	if strings.Contains(clusterIP, ":") {
		family = v1.IPv6Protocol
	}
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP}, IPFamilies: []v1.IPFamily{family},
			Ports: []v1.ServicePort{{Name: "p", Protocol: proto, Port: 80}}},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

// slice is the EndpointSlice of Service ns/name with the given endpoints
// (address, node name) on port 8080.
func slice(name string, proto v1.Protocol, eps ...[2]string) *discovery.EndpointSlice {
	at := discovery.AddressTypeIPv4
	if len(eps) > 0 && strings.Contains(eps[0][0], ":") {
		at = discovery.AddressTypeIPv6
	}
	es := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: name + "-" + strings.ToLower(string(at)), Labels: map[string]string{discovery.LabelServiceName: name}},
		AddressType: at,
		Ports:       []discovery.EndpointPort{{Name: ptr("p"), Protocol: ptr(proto), Port: ptr(int32(8080))}},
	}
	for _, ep := range eps {
		es.Endpoints = append(es.Endpoints, discovery.Endpoint{Addresses: []string{ep[0]}, NodeName: ptr(ep[1])})
	}
	return es
}

// podEPs are the endpoints of pods i… of the lab, of family v6 or not, on
// nodes (node-a for the lab's own pods, or as given).
func (l *lab) podEPs(v6 bool, node string, pods ...int) [][2]string {
	var out [][2]string
	for _, i := range pods {
		out = append(out, [2]string{l.c.Pods[i].IP(v6).String(), node})
	}
	return out
}

// tally counts the attempts per identity (or errno) and fails unless
// every peer is want.
func tally(t *testing.T, as []attempt, peer string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, a := range as {
		if a.Errno != "" {
			n[a.Errno]++
			continue
		}
		n[a.Identity]++
		if a.Peer != peer {
			t.Errorf("peer reads %s, want the Service's %s", a.Peer, peer)
		}
	}
	return n
}

// A nil Dataplane refuses to sync and has nothing to clean up or close.
func TestNilDataplane(t *testing.T) {
	var dp *ebpf.Dataplane
	if _, err := dp.Executor(v1.IPv4Protocol).Sync(context.Background(), nil); err == nil {
		t.Error("Sync on a nil Dataplane succeeded")
	}
	if err := errors.Join(dp.Cleanup(), dp.Close()); err != nil {
		t.Error(err)
	}
}
