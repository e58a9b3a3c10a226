package proxy

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"pgregory.net/rapid"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// TestFrontendConflicts: two Services with one nodePort, or one external
// IP, port and protocol, are warned about once, naming the one not served
// and the owner; a change that keeps the conflict warns no more, and one
// that ends it and brings it back warns again. One Service whose address
// is both an external and a load-balancer IP is no conflict, nor is the
// cluster IP of a Service with two ports.
func TestFrontendConflicts(t *testing.T) {
	svc := func(name, ip string, nodePort int32, externalIPs ...string) *v1.Service {
		return &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeNodePort, ClusterIP: ip, ClusterIPs: []string{ip}, ExternalIPs: externalIPs,
				Ports: []v1.ServicePort{{Name: "p", Port: 80, NodePort: nodePort, Protocol: v1.ProtocolTCP}}},
		}
	}
	lb := svc("l", "198.19.0.4", 30100, "198.18.0.100")
	lb.Spec.Type = v1.ServiceTypeLoadBalancer
	lb.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.18.0.100"}}
	twoPorts := svc("t", "198.19.0.6", 30120)
	twoPorts.Spec.Ports = append(twoPorts.Spec.Ports, v1.ServicePort{Name: "q", Port: 81, NodePort: 30121, Protocol: v1.ProtocolTCP})
	services := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	builder, err := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol})
	if err != nil {
		t.Fatal(err)
	}
	build := func() map[v1.IPFamily]*ruleset.Ruleset {
		ss, _ := services.Snapshot()
		es, _ := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{}).Snapshot()
		rs, _ := builder.Build(ss, es)
		return map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: rs}
	}
	must := warnings.Must(t)
	var c frontendConflicts
	conflict := []string{`Service ns/b: port "p"/TCP: node port 30080/TCP is also Service port ns/a:p's, which takes it: not served there`}
	for _, step := range []struct {
		svc  *v1.Service
		want []string
	}{
		{svc("a", "198.19.0.1", 30080), nil},
		{svc("b", "198.19.0.2", 30080), conflict},
		{svc("c", "198.19.0.3", 30090), nil},
		{svc("b", "198.19.0.2", 30081), nil},
		{svc("b", "198.19.0.2", 30080), conflict},
		{lb, nil},
		{twoPorts, nil}, // its ports share its cluster IP: no conflict
		{svc("d", "198.19.0.5", 30110, "198.18.0.100"), []string{`Service ns/l: port "p"/TCP: 198.18.0.100:80/TCP is also Service port ns/d:p's, which takes it: not served there`}},
	} {
		must.Used(services.Update(step.svc))
		var got []string
		for _, w := range c.check(build()) {
			got = append(got, w.String())
		}
		if diff := cmp.Diff(step.want, got); diff != "" {
			t.Errorf("after %s (nodePort %d): warnings (-want +got):\n%s", step.svc.Name, step.svc.Spec.Ports[0].NodePort, diff)
		}
	}
}

// TestFrontendConflictsIncremental: after any sequence of Service changes
// (Rulesets made by Builder.Update, as the engine makes them), the warnings
// a checker holds, having looked only at what changed, are those of a new
// checker looking at the whole Ruleset.
func TestFrontendConflictsIncremental(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		services := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
		eps, _ := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{}).Snapshot()
		builder, err := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol})
		if err != nil {
			t.Fatal(err)
		}
		var c frontendConflicts
		var rs *ruleset.Ruleset
		for step := range rapid.IntRange(1, 25).Draw(t, "steps") {
			name := fmt.Sprintf("s%d", rapid.IntRange(0, 5).Draw(t, "service"))
			if rapid.IntRange(0, 4).Draw(t, "delete") == 0 {
				services.Delete("ns", name)
			} else {
				svc := &v1.Service{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
					Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, ClusterIP: "198.19.0." + name[1:] + "0", ClusterIPs: []string{"198.19.0." + name[1:] + "0"},
						ExternalIPs: rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"198.18.0.100", "198.18.0.101"}), 0, 2, rapid.ID[string]).Draw(t, "externalIPs")},
				}
				for i := range rapid.IntRange(1, 2).Draw(t, "ports") {
					svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: fmt.Sprintf("p%d", i), Protocol: v1.ProtocolTCP,
						Port: int32(rapid.IntRange(80, 81).Draw(t, "port")), NodePort: int32(rapid.IntRange(30000, 30002).Draw(t, "nodePort"))})
				}
				if ip := rapid.SampledFrom([]string{"", "198.18.0.100", "198.18.0.102"}).Draw(t, "lb"); ip != "" {
					svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip}}
				}
				services.Update(svc)
			}
			ss, _ := services.Snapshot()
			if rs == nil {
				rs, _ = builder.Build(ss, eps)
			} else {
				rs, _, _ = builder.Update(rs, ss, eps)
			}
			c.check(map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: rs})
			var whole frontendConflicts
			whole.check(map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: rs})
			if diff := cmp.Diff(whole.warned, c.warned); diff != "" {
				t.Fatalf("step %d: warnings held (-whole +incremental):\n%s", step, diff)
			}
		}
	})
}

// BenchmarkFrontendConflictsOneChange: one endpoint of one of 10,000
// Services changed, its Ruleset made by Builder.Update and checked, as the
// reference proxies check after each sync.
func BenchmarkFrontendConflictsOneChange(b *testing.B) {
	w := scaleworld.New(scalegen.Spec{Services: 10000})
	w.Incremental = true
	var c frontendConflicts
	c.check(map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: w.Ruleset})
	b.ReportAllocs()
	for k := 0; b.Loop(); k++ {
		c.check(map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: w.ChangeEndpoints(k%10000, 1+k%2)})
	}
}
