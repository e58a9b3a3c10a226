package manifests_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

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

// A Watcher reads the manifests again once a change has settled: here with
// a fake clock, and a settle interval of one second.
func ExampleWatcher() {
	dir, err := os.MkdirTemp("", "manifests")
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "services.yaml")
	web := "apiVersion: v1\nkind: Service\nmetadata: {namespace: default, name: web}\n" +
		"spec: {clusterIP: 198.19.0.10, ports: [{port: 80}]}\n---\n"
	if err := os.WriteFile(path, []byte(web), 0o644); err != nil {
		fmt.Println("error:", err)
		return
	}
	w := manifests.NewWatcher(path, time.Second)
	first, err := w.Read()
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("first read:", first.PerFile)

	// The file is emptied; the Watcher waits for it to settle.
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		fmt.Println("error:", err)
		return
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fmt.Println("poll at 0 s says read:", w.Poll(t0))
	fmt.Println("poll at 1 s says read:", w.Poll(t0.Add(time.Second)))
	next, err := w.Read()
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("losses:", manifests.Losses(first, next))
	// Output:
	// first read: map[services.yaml:1]
	// poll at 0 s says read: false
	// poll at 1 s says read: true
	// losses: [services.yaml: 1 → 0 objects]
}
