package manifests_test

import (
	"fmt"

	"github.com/svcproxy/svcproxy/manifests"
)

// Parse reads every document of a multi-document YAML file; objects of other
// kinds are skipped with a warning.
func ExampleParse() {
	objs, warnings, err := manifests.Parse([]byte(`
apiVersion: v1
kind: Service
metadata: {namespace: default, name: web}
spec:
  clusterIP: 198.19.0.10
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  namespace: default
  name: web-1
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints: [{addresses: [198.18.1.2]}]
ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: ConfigMap
metadata: {namespace: default, name: settings}
`))
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(len(objs.Services), "Service,", len(objs.EndpointSlices), "EndpointSlice")
	for _, w := range warnings {
		fmt.Println("warning:", w)
	}
	// Output:
	// 1 Service, 1 EndpointSlice
	// warning: ConfigMap default/settings: apiVersion "v1" kind "ConfigMap" is not read: skipped
}

// A file that does not decode is an error naming the object; nothing from it
// is returned.
func ExampleParse_malformed() {
	_, _, err := manifests.Parse([]byte(`{"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": "default", "name": "web"}, "spec": {"ports": "80"}}`))
	fmt.Println(err)
	// Output: document 1: Service default/web: json: cannot unmarshal string into Go struct field ServiceSpec.spec.ports of type []v1.ServicePort
}
