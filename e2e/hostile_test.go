//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/topology"
)

// TestHostileObjectsRenderValidRules: whatever Services and EndpointSlices
// hold — hostile names, garbage addresses, out-of-range numbers, colliding
// frontends — nothing panics and the kernel tools accept every rendered
// ruleset, in both families and both backends, the nftables one in both
// layouts (iptables-restore --test, nft --check, inside a namespace the test
// creates).
func TestHostileObjectsRenderValidRules(t *testing.T) {
	lab := netns.NewLab(t)
	ns := lab.NewNS("check")
	rapid.Check(t, func(rt *rapid.T) {
		svcs := rapid.SliceOfN(hostileService(), 0, 8).Draw(rt, "services")
		var slices []*discovery.EndpointSlice
		for i, svc := range svcs {
			// Most Services get slices meant for them, so that endpoints
			// are rendered; the slices may still be broken.
			for j := range rapid.IntRange(0, 2).Draw(rt, fmt.Sprint("slicesFor", i)) {
				slices = append(slices, hostileSliceFor(svc).Draw(rt, fmt.Sprint("slice", i, j)))
			}
		}
		for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			st := servicemap.NewTracker(family, servicemap.Filter{})
			et := endpoints.NewTracker(family, servicemap.Filter{})
			// Hostile objects warn, or are skipped, by design: what this
			// test checks is that the rules rendered from the rest are
			// valid.
			for _, s := range svcs {
				_, _ = st.Update(s)
			}
			for _, es := range slices {
				_, _ = et.Update(es)
			}
			b, err := ruleset.NewBuilder(ruleset.Config{Family: family, Node: topology.Node{Name: "node-a", Zone: "zone-a"}})
			if err != nil {
				rt.Fatal(err)
			}
			ss, _ := st.Snapshot()
			es, _ := et.Snapshot()
			rs, _ := b.Build(ss, es)

			restore := "iptables-restore"
			if family == v1.IPv6Protocol {
				restore = "ip6tables-restore"
			}
			check(rt, ns, iptables.Render(iptables.DefaultNames(), rs), restore, "--test", "--noflush")
			script, _, err := nftables.Script(rs, nftables.Options{})
			if err != nil {
				rt.Fatalf("nftables.Script: %v", err)
			}
			check(rt, ns, []byte(script), "nft", "--check", "-f", "-")
			_, flatScript, _ := flat.Script(rs, flat.Options{})
			check(rt, ns, []byte(flatScript), "nft", "--check", "-f", "-")
		}
	})
}

// check feeds input to a kernel tool in ns and fails when it refuses it.
func check(rt *rapid.T, ns *netns.NS, input []byte, name string, args ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := ns.Command(ctx, name, args...)
	cmd.Stdin = bytes.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		rt.Fatalf("%s refused the rendered rules: %v\n%s\ninput:\n%s", name, err, stderr.String(), input)
	}
}

// mostly draws from valid nine times in ten, else from hostile: objects
// must often be usable, so that their rules are rendered and checked, and
// often not.
func mostly[T any](t *rapid.T, label string, valid, hostile []T) T {
	// rapid leans towards the ends of a range, so the hostile case is a
	// value in the middle.
	if rapid.IntRange(0, 9).Draw(t, label+"Hostile") == 4 {
		return rapid.SampledFrom(hostile).Draw(t, label)
	}
	return rapid.SampledFrom(valid).Draw(t, label)
}

// Pools small enough that frontends collide, with hostile values beside
// them.
var (
	// Valid names as long as Kubernetes allows (63-character labels, a
	// 15-character port name): the longest chain names and comments.
	namespaces   = []string{"default", strings.Repeat("n", 63)}
	names        = []string{"web", "dns", strings.Repeat("s", 63)}
	badNames     = []string{"x;rm -rf", "DROP\n-j ACCEPT", "very-long-name-" + strings.Repeat("x", 60), "", "UPPER", "a\"b"}
	addrs        = []string{"198.19.0.1", "198.19.0.2", "2001:db8:19::1", "2001:db8:19::2"}
	badAddrs     = []string{"None", "", "garbage", "127.0.0.1", "::1", "198.19.0.1 ", "0.0.0.0", "224.0.0.1", "fe80::1%eth0", "::ffff:198.19.0.1"}
	podAddrs     = []string{"198.18.64.2", "198.18.64.3", "2001:db8:18:40::2", "2001:db8:18:40::3"}
	ports        = []int32{53, 80, 443, 30080}
	badPorts     = []int32{0, -1, 65535, 65536}
	protocols    = []v1.Protocol{v1.ProtocolTCP, v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}
	badProtocols = []v1.Protocol{"", "ICMP", "tcp"}
	policies     = []string{"", "Local", "Cluster"}
	badStrings   = []string{"PreferClose", "bogus\"quote", "local", "ClientIP"}
	ranges       = []string{"198.18.0.0/16", " 198.18.32.0/19 ", "2001:db8::/32", "0.0.0.0/0"}
	badRanges    = []string{"bad", "198.18.0.1/33", "198.18.0.0"}
	portNames    = []string{"p", "q", "", strings.Repeat("p", 15)}
	badPortNames = []string{"P!", "x\ny", "-p"}
)

func hostileService() *rapid.Generator[*v1.Service] {
	return rapid.Custom(func(t *rapid.T) *v1.Service {
		svc := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: mostly(t, "ns", namespaces, badNames), Name: mostly(t, "name", names, badNames)},
			Spec: v1.ServiceSpec{
				Type:                  v1.ServiceType(mostly(t, "type", []string{"", "ClusterIP", "NodePort", "LoadBalancer"}, []string{"ExternalName", "Weird"})),
				ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicy(mostly(t, "etp", policies, badStrings)),
				SessionAffinity:       v1.ServiceAffinity(mostly(t, "affinity", []string{"", "None", "ClientIP"}, badStrings)),
				HealthCheckNodePort:   mostly(t, "hcnp", ports, badPorts),
			},
		}
		for i := range rapid.IntRange(1, 2).Draw(t, "clusterIPs") {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, mostly(t, fmt.Sprint("clusterIP", i), addrs, badAddrs))
		}
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
		for i := range rapid.IntRange(0, 2).Draw(t, "externalIPs") {
			svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, mostly(t, fmt.Sprint("externalIP", i), addrs, badAddrs))
		}
		for i := range rapid.IntRange(0, 2).Draw(t, "ranges") {
			svc.Spec.LoadBalancerSourceRanges = append(svc.Spec.LoadBalancerSourceRanges, mostly(t, fmt.Sprint("range", i), ranges, badRanges))
		}
		if rapid.Bool().Draw(t, "itp") {
			itp := v1.ServiceInternalTrafficPolicy(mostly(t, "itpValue", policies[1:], badStrings))
			svc.Spec.InternalTrafficPolicy = &itp
		}
		if rapid.Bool().Draw(t, "td") {
			td := mostly(t, "tdValue", []string{"PreferClose", "PreferSameZone", "PreferSameNode"}, badStrings)
			svc.Spec.TrafficDistribution = &td
		}
		if rapid.Bool().Draw(t, "timeout") {
			timeout := mostly(t, "timeoutValue", []int32{1, 60, 10800, 86400}, []int32{0, -5, 86401})
			svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &timeout}}
		}
		for i := range rapid.IntRange(1, 3).Draw(t, "ports") {
			svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{
				Name:     mostly(t, fmt.Sprint("portName", i), portNames, badPortNames),
				Protocol: mostly(t, fmt.Sprint("protocol", i), protocols, badProtocols),
				Port:     mostly(t, fmt.Sprint("port", i), ports, badPorts),
				NodePort: mostly(t, fmt.Sprint("nodePort", i), []int32{0, 30080, 30081}, badPorts),
			})
		}
		for i := range rapid.IntRange(0, 2).Draw(t, "ingress") {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: mostly(t, fmt.Sprint("ingress", i), addrs, badAddrs)})
		}
		return svc
	})
}

// hostileSliceFor makes EndpointSlices that are mostly svc's.
func hostileSliceFor(svc *v1.Service) *rapid.Generator[*discovery.EndpointSlice] {
	return rapid.Custom(func(t *rapid.T) *discovery.EndpointSlice {
		es := &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: mostly(t, "ns", []string{svc.Namespace}, badNames),
				Name:      mostly(t, "name", []string{svc.Name}, badNames) + "-" + fmt.Sprint(rapid.IntRange(1, 3).Draw(t, "n")),
				Labels:    map[string]string{discovery.LabelServiceName: mostly(t, "service", []string{svc.Name}, badNames)},
			},
			AddressType: discovery.AddressType(mostly(t, "addressType", []string{"IPv4", "IPv6"}, []string{"FQDN", "bogus"})),
		}
		for i, sp := range svc.Spec.Ports {
			name := mostly(t, fmt.Sprint("portName", i), []string{sp.Name}, badPortNames)
			proto := mostly(t, fmt.Sprint("protocol", i), []v1.Protocol{sp.Protocol}, badProtocols)
			port := mostly(t, fmt.Sprint("port", i), []int32{8080, 53}, badPorts)
			es.Ports = append(es.Ports, discovery.EndpointPort{Name: &name, Protocol: &proto, Port: &port})
		}
		family := podAddrs[:2]
		if es.AddressType == discovery.AddressTypeIPv6 {
			family = podAddrs[2:]
		}
		for i := range rapid.IntRange(0, 4).Draw(t, "endpoints") {
			b := func(label string) *bool {
				if !rapid.Bool().Draw(t, label+"Set") {
					return nil
				}
				v := rapid.Bool().Draw(t, label)
				return &v
			}
			node := mostly(t, fmt.Sprint("node", i), []string{"node-a", "node-b", ""}, []string{"node-a\n", "x y"})
			es.Endpoints = append(es.Endpoints, discovery.Endpoint{
				Addresses:  []string{mostly(t, fmt.Sprint("addr", i), family, append(badAddrs, podAddrs...))},
				Conditions: discovery.EndpointConditions{Ready: b(fmt.Sprint("ready", i)), Serving: b(fmt.Sprint("serving", i)), Terminating: b(fmt.Sprint("terminating", i))},
				NodeName:   &node,
			})
		}
		return es
	})
}
