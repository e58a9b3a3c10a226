package source_test

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/source"
	"github.com/svcproxy/svcproxy/state"
)

// Watch fills a State from an API server (here client-go's fake) before it
// returns: the first Snapshot already holds the cluster's Services and
// endpoints. A Service that the State skips comes back as a warning.
func ExampleWatch() {
	port, portName := int32(8080), "http"
	client := fake.NewClientset(
		&v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"},
			Spec: v1.ServiceSpec{
				ClusterIPs: []string{"198.19.0.10"},
				Ports:      []v1.ServicePort{{Name: "http", Port: 80}},
			},
		},
		&v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "broken"},
			Spec: v1.ServiceSpec{
				ClusterIPs: []string{"not-an-ip"},
				Ports:      []v1.ServicePort{{Port: 80}},
			},
		},
		&discovery.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: &portName, Port: &port}},
			Endpoints:   []discovery.Endpoint{{Addresses: []string{"198.18.1.1"}}, {Addresses: []string{"198.18.1.2"}}},
		},
	)
	st, err := state.New([]v1.IPFamily{v1.IPv4Protocol}, "node-a", servicemap.Filter{})
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	_, err = source.Watch(ctx, client, st, source.Options{
		OnWarnings: func(ws []svcproxy.Warning) {
			for _, w := range ws {
				fmt.Println("warning:", w)
			}
		},
	})
	if err != nil {
		panic(err)
	}
	fam := st.Snapshot().Families()[0]
	for sp := range fam.Services.All() {
		fmt.Printf("%s %s: %d endpoints\n", sp.Name, sp.ClusterIP, len(fam.Endpoints.Port(sp.Name).Endpoints))
	}
	// Output:
	// warning: Service demo/broken: invalid cluster IP "not-an-ip"
	// demo/web:http 198.19.0.10: 2 endpoints
}
