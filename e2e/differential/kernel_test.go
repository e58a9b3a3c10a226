//go:build linux

package differential

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/trace"
	"github.com/svcproxy/svcproxy/trace/iptrace"
)

// kernelStates is how many of a run's first states are also checked with
// real packets (see sampleKernels).
const kernelStates = 3

const (
	// reachTimeout bounds a connection that should be answered.
	reachTimeout = 2 * time.Second
	// silenceTimeout is how long a dropped packet is waited for.
	silenceTimeout = 700 * time.Millisecond
)

// observation is what a real packet met in a kernel.
type observation struct {
	// kind: "reached", "refused" (a reject or a closed port), "silence"
	// (dropped, or routed where nothing answers), "blocked" (the node's
	// own packet, rejected or dropped before it left: EPERM),
	// "unreachable" or "error: …".
	kind string
	// identity is the pod that answered; masqueraded, whether it saw
	// another source address than the client's.
	identity    string
	masqueraded bool
}

func (o observation) String() string {
	if o.kind != "reached" {
		return o.kind
	}
	return fmt.Sprintf("reached %s (masqueraded %v)", o.identity, o.masqueraded)
}

// sample is a probe to send to both kernels: the first of its class in a
// state (see sampleClass).
type sample struct {
	probe probe
	class string
}

// sampleClass is the class of kube-proxy's outcome for p, the source's kind
// included; "" when p is not sent for real: SCTP (the echo servers do not
// speak it), the node's loopback, flows that no Service takes (where
// they go is routing's business), frontends at special-purpose addresses
// (unspecified, loopback, link-local, multicast: a client keeps a loopback
// packet to itself, and the others are not routed to the node), and
// hairpin flows that may be DNATed back to their own source without
// masquerade (kube-proxy 1.37's nftables mode, for an endpoint on another
// node): the source then drops its own packet, so what a real packet shows
// depends on the random choice of target, not on the rules.
func sampleClass(p probe, ref trace.Outcome) string {
	if p.packet.Protocol == v1.ProtocolSCTP || p.front.nodeOnly || ref.Verdict == ruleset.VerdictNotServed || special(p.packet.Dst.Addr()) {
		return ""
	}
	for _, t := range ref.Targets {
		if t.Endpoint.Addr() == p.packet.Src.Addr() && !t.Masquerade {
			return ""
		}
	}
	c := fmt.Sprintf("%s from %s", ref.Verdict, p.src.name)
	if ref.Verdict == ruleset.VerdictForward {
		c += fmt.Sprintf(", %d target(s), masquerade %v", min(len(ref.Targets), 2), ref.Masquerade)
	}
	return c
}

// special reports whether a is in a special-purpose range: unspecified,
// loopback, link-local or multicast.
func special(a netip.Addr) bool {
	return a.IsUnspecified() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast()
}

// host is the namespace of c that sends p, and the local address it sends
// from (the node picks the node address; the others have one each).
func host(c *netns.Cluster, p probe) (*netns.NS, netip.AddrPort, error) {
	if p.src.fromNode {
		return c.Node.NS, netip.AddrPortFrom(p.src.addr, 0), nil
	}
	for _, h := range slices.Concat(c.Pods, c.Clients) {
		if h.IP(p.src.addr.Is6()) == p.src.addr {
			return h.NS, netip.AddrPort{}, nil
		}
	}
	return nil, netip.AddrPort{}, fmt.Errorf("no namespace has source %v", p.src.addr)
}

// send sends p's packet for real in c and says what it met within timeout.
func send(c *netns.Cluster, p probe, timeout time.Duration) observation {
	ns, local, err := host(c, p)
	if err != nil {
		return observation{kind: "error: " + err.Error()}
	}
	var identity string
	var seen netip.AddrPort
	switch p.packet.Protocol {
	case v1.ProtocolUDP:
		u, err := ns.DialUDP(local, p.packet.Dst)
		if err != nil {
			return classified(err)
		}
		defer u.Close()
		r, err := u.Exchange(timeout)
		if err != nil {
			return classified(err)
		}
		identity, seen = r.Identity, r.Source
	default:
		conn, err := ns.Dial("tcp", local, p.packet.Dst, timeout)
		if err != nil {
			return classified(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(timeout))
		line, err := bufio.NewReader(io.LimitReader(conn, 2048)).ReadString('\n')
		if err != nil {
			return classified(err)
		}
		// "svcproxy-echo <identity> <source it saw>"
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "svcproxy-echo" {
			return observation{kind: fmt.Sprintf("error: not an echo reply: %q", line)}
		}
		identity = f[1]
		if seen, err = netip.ParseAddrPort(f[2]); err != nil {
			return observation{kind: "error: " + err.Error()}
		}
	}
	return observation{kind: "reached", identity: identity, masqueraded: seen.Addr().Unmap() != p.src.addr}
}

// classified is the observation of a failed exchange.
func classified(err error) observation {
	switch {
	case errors.Is(err, netns.ErrRefused):
		return observation{kind: "refused"}
	case errors.Is(err, netns.ErrTimeout):
		return observation{kind: "silence"}
	case errors.Is(err, netns.ErrUnreachable):
		return observation{kind: "unreachable"}
	case errors.Is(err, syscall.EPERM):
		// The node's own packet, rejected or dropped on its way out.
		return observation{kind: "blocked"}
	}
	return observation{kind: "error: " + err.Error()}
}

// expected checks an observation against the outcome the evaluator read
// from the same kernel's rules: a forwarded flow reaches one of its
// targets, masqueraded as the target says; a rejected one is refused; a
// dropped one meets silence. A flow no Service takes is not checked: where
// it goes is routing's business.
func expected(c *netns.Cluster, o observation, want trace.Outcome) error {
	switch want.Verdict {
	case ruleset.VerdictForward:
		if o.kind != "reached" {
			return fmt.Errorf("%v, but the rules forward it", o)
		}
		for _, t := range want.Targets {
			for _, pod := range c.Pods {
				if pod.Label == o.identity && pod.IP(t.Endpoint.Addr().Is6()) == t.Endpoint.Addr() {
					if t.Masquerade != o.masqueraded {
						return fmt.Errorf("%v, but the rules masquerade it %v", o, t.Masquerade)
					}
					return nil
				}
			}
		}
		return fmt.Errorf("%v, not one of the rules' targets %s", o, outcomeString(want))
	case ruleset.VerdictReject:
		if o.kind != "refused" && o.kind != "blocked" {
			return fmt.Errorf("%v, but the rules reject it", o)
		}
	case ruleset.VerdictDrop, ruleset.VerdictFirewall:
		if o.kind != "silence" && o.kind != "blocked" {
			return fmt.Errorf("%v, but the rules drop it", o)
		}
	}
	return nil
}

// sampleKernels sends one probe of each class of kube-proxy's outcome
// (sampleClass) through both kernels, and reports where what the packets
// met differs between them, or from what each one's rules say.
func sampleKernels(pr pair, ps []probe, ref, ours evaluator) (sent int, report []string) {
	seen := map[string]bool{}
	for _, p := range ps {
		ro, _, rerr := ref.evaluate(p.packet)
		oo, _, oerr := ours.evaluate(p.packet)
		class := sampleClass(p, ro)
		// Probes whose outcomes differ are reported (or counted in an
		// undefined case) already.
		if rerr != nil || oerr != nil || class == "" || seen[class] || iptrace.Agree(comparable(ro), comparable(oo)) != nil {
			continue
		}
		seen[class] = true
		sent++
		timeout := reachTimeout
		if ro.Verdict != ruleset.VerdictForward && ro.Verdict != ruleset.VerdictReject {
			timeout = silenceTimeout
		}
		var kernelRef, kernelOurs observation
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); kernelRef = send(pr.ref.cluster, p, timeout) }()
		go func() { defer wg.Done(); kernelOurs = send(pr.ours.cluster, p, timeout) }()
		wg.Wait()
		var problems []string
		if err := expected(pr.ref.cluster, kernelRef, ro); err != nil {
			problems = append(problems, "kube-proxy's kernel: "+err.Error())
		}
		if err := expected(pr.ours.cluster, kernelOurs, oo); err != nil {
			problems = append(problems, "our kernel: "+err.Error())
		}
		// With several targets each kernel picks its own: each is checked
		// against its rules above.
		single := len(ro.Targets) <= 1
		if kernelRef.kind != kernelOurs.kind ||
			single && (kernelRef.identity != kernelOurs.identity || kernelRef.masqueraded != kernelOurs.masqueraded) {
			problems = append(problems, fmt.Sprintf("kube-proxy's kernel: %v; ours: %v", kernelRef, kernelOurs))
		}
		if len(problems) > 0 {
			report = append(report, fmt.Sprintf("%s, real packets: %v (%s):\n    %s", pr.mode, p, class, strings.Join(problems, "\n    ")))
		}
	}
	return sent, report
}
