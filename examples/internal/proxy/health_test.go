package proxy

import (
	"net"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/endpoints"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// TestHealthServersFollowRulesets: a health check node port server starts
// when a Service with one appears and stops when it goes, also when the
// Rulesets are made by Builder.Update.
func TestHealthServersFollowRulesets(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()

	lb := service("lb", "198.19.0.1")
	lb.Spec.Type = v1.ServiceTypeLoadBalancer
	lb.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	lb.Spec.HealthCheckNodePort = port
	lb.Spec.Ports[0].NodePort = 30080
	lb.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.19.100.1"}}

	services := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	slices := endpoints.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	b, err := ruleset.NewBuilder(ruleset.Config{Family: v1.IPv4Protocol})
	if err != nil {
		t.Fatal(err)
	}
	var rs *ruleset.Ruleset
	sync := func() {
		ss, _ := services.Snapshot()
		es, _ := slices.Snapshot()
		rs, _, _ = b.Update(rs, ss, es)
	}
	h := newHealthServers(discardLogger())
	defer h.close()

	services.Update(service("plain", "198.19.0.2"))
	sync()
	h.update(map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: rs})
	if len(h.servers) != 0 {
		t.Fatalf("servers %v without a health check node port", h.servers)
	}

	services.Update(lb)
	sync()
	h.update(map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: rs})
	if hs, ok := h.servers[uint16(port)]; !ok || hs.service.Name != "lb" {
		t.Fatalf("no server on health check node port %d: %v", port, h.servers)
	}

	services.Delete(lb.Namespace, lb.Name)
	sync()
	h.update(map[v1.IPFamily]*ruleset.Ruleset{v1.IPv4Protocol: rs})
	if len(h.servers) != 0 {
		t.Fatalf("servers %v after the Service went", h.servers)
	}
}
