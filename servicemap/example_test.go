package servicemap_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/servicemap"
)

// A dual-stack LoadBalancer Service gives one ServicePort per port in each
// family; a malformed externalIP is dropped with a warning.
func ExampleFromService() {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "frontend"},
		Spec: v1.ServiceSpec{
			Type:                  v1.ServiceTypeLoadBalancer,
			ClusterIPs:            []string{"198.19.0.10", "2001:db8:19::a"},
			ExternalIPs:           []string{"198.18.5.5", "not-an-ip"},
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal,
			HealthCheckNodePort:   32100,
			Ports: []v1.ServicePort{
				{Name: "https", Port: 443, NodePort: 30443},
				{Name: "http", Port: 80, NodePort: 30080},
			},
		},
		Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{
			{IP: "198.18.9.9"}, {IP: "2001:db8:18::9"},
		}}},
	}
	for _, family := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		ports, skipped, warnings := servicemap.FromService(svc, family, servicemap.Filter{})
		fmt.Printf("%s: skipped=%q\n", family, skipped)
		for _, sp := range ports {
			fmt.Printf("  %s/%s %s:%d nodePort=%d external=%v lb=%v eTPLocal=%v hc=%d\n",
				sp.Name, sp.Name.Protocol, sp.ClusterIP, sp.Port, sp.NodePort,
				sp.ExternalIPs, sp.LoadBalancerIPs, sp.ExternalPolicyLocal, sp.HealthCheckNodePort)
		}
		for _, w := range warnings {
			fmt.Println("  warning:", w)
		}
	}

	// A headless Service is skipped on purpose, without a warning.
	headless := svc.DeepCopy()
	headless.Spec.Type = v1.ServiceTypeClusterIP
	headless.Spec.ClusterIPs = []string{v1.ClusterIPNone}
	_, skipped, warnings := servicemap.FromService(headless, v1.IPv4Protocol, servicemap.Filter{})
	fmt.Printf("headless: skipped=%q warnings=%d\n", skipped, len(warnings))
	// Output:
	// IPv4: skipped=""
	//   shop/frontend:http/TCP 198.19.0.10:80 nodePort=30080 external=[198.18.5.5] lb=[198.18.9.9] eTPLocal=true hc=32100
	//   shop/frontend:https/TCP 198.19.0.10:443 nodePort=30443 external=[198.18.5.5] lb=[198.18.9.9] eTPLocal=true hc=32100
	//   warning: Service shop/frontend: invalid externalIP "not-an-ip" dropped
	// IPv6: skipped=""
	//   shop/frontend:http/TCP 2001:db8:19::a:80 nodePort=30080 external=[] lb=[2001:db8:18::9] eTPLocal=true hc=32100
	//   shop/frontend:https/TCP 2001:db8:19::a:443 nodePort=30443 external=[] lb=[2001:db8:18::9] eTPLocal=true hc=32100
	//   warning: Service shop/frontend: invalid externalIP "not-an-ip" dropped
	// headless: skipped="headless Service" warnings=0
}

// A Tracker takes Service events in any order and reports, at each
// Snapshot, which ServicePorts were added, changed or removed.
func ExampleTracker() {
	must := warnings.Must(warnings.Example)
	tracker := servicemap.NewTracker(v1.IPv4Protocol, servicemap.Filter{})
	web := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: v1.ServiceSpec{
			ClusterIPs: []string{"198.19.0.20"},
			Ports:      []v1.ServicePort{{Name: "http", Port: 80}},
		},
	}
	dns := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "dns"},
		Spec: v1.ServiceSpec{
			ClusterIPs: []string{"198.19.0.53"},
			Ports: []v1.ServicePort{
				{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP},
				{Name: "dns-tcp", Port: 53, Protocol: v1.ProtocolTCP},
			},
		},
	}
	must.Used(tracker.Update(web))
	must.Used(tracker.Update(dns))
	snap, changes := tracker.Snapshot()
	fmt.Println("added:", changes.Added, "ports:", snap.Len())

	// Give web a second port and session affinity, drop dns.
	web2 := web.DeepCopy()
	web2.Spec.Ports = append(web2.Spec.Ports, v1.ServicePort{Name: "https", Port: 443})
	web2.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	must.Used(tracker.Update(web2))
	tracker.Delete("kube-system", "dns")
	fmt.Println("pending:", tracker.Pending())
	later, changes := tracker.Snapshot()
	fmt.Println("added:", changes.Added, "changed:", changes.Changed, "removed:", changes.Removed)
	for _, sp := range later.Ports() {
		fmt.Printf("%s %s:%d affinity=%v\n", sp.Name, sp.ClusterIP, sp.Port, sp.Affinity)
	}

	// The earlier Snapshot is unchanged.
	fmt.Println("earlier snapshot ports:", snap.Len())
	// Output:
	// added: [kube-system/dns:dns kube-system/dns:dns-tcp shop/web:http] ports: 3
	// pending: 2
	// added: [shop/web:https] changed: [shop/web:http] removed: [kube-system/dns:dns kube-system/dns:dns-tcp]
	// shop/web:http 198.19.0.20:80 affinity=ClientIP(10800s)
	// shop/web:https 198.19.0.20:443 affinity=ClientIP(10800s)
	// earlier snapshot ports: 3
}
