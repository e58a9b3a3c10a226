package manifests_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

// names lists the objects read, in order, as "Kind namespace/name" (or
// "Node name").
func names(o *state.Objects) []string {
	if o == nil {
		return nil
	}
	var out []string
	for _, s := range o.Services {
		out = append(out, "Service "+s.Namespace+"/"+s.Name)
	}
	for _, es := range o.EndpointSlices {
		out = append(out, "EndpointSlice "+es.Namespace+"/"+es.Name)
	}
	for _, n := range o.Nodes {
		out = append(out, "Node "+n.Namespace+n.Name)
	}
	return out
}

func warningStrings(ws []svcproxy.Warning) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.String())
	}
	return out
}

const (
	svcWeb = `apiVersion: v1
kind: Service
metadata:
  namespace: ns
  name: web
spec:
  clusterIP: 198.19.0.10
  ports:
  - name: http
    port: 80
`
	sliceWeb = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  namespace: ns
  name: web-1
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [198.18.1.1]
  nodeName: node-a
`
	nodeA = `apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {topology.kubernetes.io/zone: z1}
`
	configMap = `apiVersion: v1
kind: ConfigMap
metadata: {namespace: ns, name: settings}
data: {a: b}
`
	svcJSON = `{
  "apiVersion": "v1",
  "kind": "Service",
  "metadata": {"namespace": "ns", "name": "api"},
  "spec": {"clusterIP": "198.19.0.11", "ports": [{"port": 443}]}
}`
)

func TestParse(t *testing.T) {
	tests := []struct {
		name         string
		input        string
		want         []string
		wantWarnings []string
	}{{
		name:  "empty",
		input: "",
	}, {
		name:  "only comments and separators",
		input: "# nothing here\n---\n# nor here\n---\n\n---\n",
	}, {
		name:  "one YAML document",
		input: svcWeb,
		want:  []string{"Service ns/web"},
	}, {
		name:  "multi-document YAML with comment-only and empty documents",
		input: "---\n# Services\n" + svcWeb + "---\n# just a comment\n---\n---\n" + sliceWeb + "---\n" + nodeA + "---\n",
		want:  []string{"Service ns/web", "EndpointSlice ns/web-1", "Node node-a"},
	}, {
		name:  "document end marker",
		input: svcWeb + "...\n",
		want:  []string{"Service ns/web"},
	}, {
		name:  "JSON object",
		input: svcJSON,
		want:  []string{"Service ns/api"},
	}, {
		name:  "JSON objects one after another",
		input: svcJSON + "\n" + strings.ReplaceAll(svcJSON, `"api"`, `"api2"`) + "\n",
		want:  []string{"Service ns/api", "Service ns/api2"},
	}, {
		name:  "JSON and YAML documents",
		input: svcJSON + "\n---\n" + svcWeb,
		want:  []string{"Service ns/api", "Service ns/web"},
	}, {
		name:  "YAML flow mapping",
		input: "{apiVersion: v1, kind: Node, metadata: {name: node-b}}\n",
		want:  []string{"Node node-b"},
	}, {
		name: "JSON List",
		input: `{"apiVersion": "v1", "kind": "List", "items": [
			` + svcJSON + `,
			{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}},
			{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "api-1", "labels": {"kubernetes.io/service-name": "api"}}, "addressType": "IPv4"}
		]}`,
		want: []string{"Service ns/api", "EndpointSlice default/api-1", "Node node-a"},
	}, {
		name:  "YAML kind List with unknown kinds",
		input: "apiVersion: v1\nkind: List\nitems:\n" + indentItem(svcWeb) + indentItem(configMap) + indentItem(sliceWeb) + indentItem("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"),
		want:  []string{"Service ns/web", "EndpointSlice ns/web-1"},
		wantWarnings: []string{
			`ConfigMap ns/settings: apiVersion "v1" kind "ConfigMap" is not read: skipped`,
			`Deployment d: apiVersion "apps/v1" kind "Deployment" is not read: skipped`,
		},
	}, {
		name:  "ServiceList",
		input: "apiVersion: v1\nkind: ServiceList\nitems:\n" + indentItem(svcWeb) + indentItem(strings.ReplaceAll(svcWeb, "name: web", "name: web2")),
		want:  []string{"Service ns/web", "Service ns/web2"},
	}, {
		name:  "EndpointSliceList",
		input: "apiVersion: discovery.k8s.io/v1\nkind: EndpointSliceList\nitems:\n" + indentItem(sliceWeb),
		want:  []string{"EndpointSlice ns/web-1"},
	}, {
		name:         "a List inside a List is not read",
		input:        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: List\n  items:\n" + indent(indentItem(svcWeb)),
		wantWarnings: []string{`List "": apiVersion "v1" kind "List" is not read: skipped`},
	}, {
		name: "what an API server fills in and a file leaves out",
		input: "apiVersion: v1\nkind: Service\nmetadata: {name: none, namespace: ns}\nspec: {clusterIP: 198.19.0.1}\n---\n" +
			"apiVersion: v1\nkind: Service\nmetadata: {name: np, namespace: ns}\nspec: {type: NodePort, clusterIP: 198.19.0.2, ports: [{name: http, port: 80}, {name: set, port: 81, nodePort: 30081}]}\n---\n" +
			"apiVersion: v1\nkind: Service\nmetadata: {name: lb, namespace: ns}\nspec: {type: LoadBalancer, allocateLoadBalancerNodePorts: false, clusterIP: 198.19.0.3, ports: [{port: 80}]}\n---\n" +
			"apiVersion: v1\nkind: Service\nmetadata: {name: headless, namespace: ns}\nspec: {clusterIP: None}\n",
		want: []string{"Service ns/none", "Service ns/np", "Service ns/lb", "Service ns/headless"},
		wantWarnings: []string{
			`Service ns/none: no ports: nothing is served`,
			`Service ns/np: port "http": type NodePort without a nodePort: no node port is served`,
		},
	}, {
		name:         "unknown kind",
		input:        configMap + "---\n" + svcWeb,
		want:         []string{"Service ns/web"},
		wantWarnings: []string{`ConfigMap ns/settings: apiVersion "v1" kind "ConfigMap" is not read: skipped`},
	}, {
		name:         "known kind of another apiVersion",
		input:        strings.Replace(svcWeb, "apiVersion: v1", "apiVersion: v2", 1),
		wantWarnings: []string{`Service ns/web: apiVersion "v2" kind "Service" is not read: skipped`},
	}, {
		name:         "EndpointSlice of the beta API",
		input:        strings.Replace(sliceWeb, "discovery.k8s.io/v1", "discovery.k8s.io/v1beta1", 1),
		wantWarnings: []string{`EndpointSlice ns/web-1: apiVersion "discovery.k8s.io/v1beta1" kind "EndpointSlice" is not read: skipped`},
	}, {
		name:  "default namespace",
		input: strings.Replace(svcWeb, "  namespace: ns\n", "", 1) + "---\n" + strings.Replace(sliceWeb, "  namespace: ns\n", "", 1) + "---\n" + nodeA,
		want:  []string{"Service default/web", "EndpointSlice default/web-1", "Node node-a"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, warnings, err := manifests.Parse([]byte(tt.input))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, names(objs)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantWarnings, warningStrings(warnings)); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func indent(doc string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(doc, "\n"), "\n", "\n  ") + "\n"
}

func indentItem(doc string) string {
	lines := strings.Split(strings.TrimRight(doc, "\n"), "\n")
	for i := range lines {
		if i == 0 {
			lines[i] = "- " + lines[i]
		} else {
			lines[i] = "  " + lines[i]
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// The objects are decoded whole, with the API's field names.
func TestParseDecodes(t *testing.T) {
	must := warnings.Must(t)
	cidrs := "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {name: kubernetes}\nspec: {cidrs: [198.19.0.0/16]}\n"
	objs, warnings, err := manifests.Parse([]byte(svcWeb + "---\n" + sliceWeb + "---\n" + nodeA + "---\n" + cidrs))
	if err != nil {
		t.Fatal(err)
	}
	wantSvc := &v1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: v1.ServiceSpec{
			ClusterIP: "198.19.0.10",
			Ports:     []v1.ServicePort{{Name: "http", Port: 80}},
		},
	}
	name, port, tcp := "http", int32(8080), v1.ProtocolTCP
	node := "node-a"
	wantSlice := &discovery.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "web-1",
			Labels: map[string]string{"kubernetes.io/service-name": "web"},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &tcp}}, // TCP: the API server's default
		Endpoints:   []discovery.Endpoint{{Addresses: []string{"198.18.1.1"}, NodeName: &node}},
	}
	wantNode := &v1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"topology.kubernetes.io/zone": "z1"}},
	}
	wantCIDR := &networkingv1.ServiceCIDR{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "ServiceCIDR"},
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"198.19.0.0/16"}},
	}
	want := &state.Objects{
		Services:       []*v1.Service{wantSvc},
		EndpointSlices: []*discovery.EndpointSlice{wantSlice},
		Nodes:          []*v1.Node{wantNode},
		ServiceCIDRs:   []*networkingv1.ServiceCIDR{wantCIDR},
	}
	if diff := cmp.Diff(want, objs); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	// What Parse gives is what a State takes, as it is.
	st, err := state.New([]v1.IPFamily{v1.IPv4Protocol}, "node-a", servicemap.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	must.None(st.Replace(*objs))
	if snap := st.Snapshot(); snap.Node.Zone != "z1" || len(snap.ServiceCIDRs) != 1 {
		t.Errorf("State after Replace: node %+v, ServiceCIDRs %v", snap.Node, snap.ServiceCIDRs)
	}
}

// TestParseDefaultsSlicePorts: a slice port without a name or protocol
// gets the API server's defaults ("", TCP), as every slice kube-proxy
// reads has them; given values stay.
func TestParseDefaultsSlicePorts(t *testing.T) {
	objs, warnings, err := manifests.Parse([]byte(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {namespace: ns, name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{port: 8080}, {name: dns, protocol: UDP, port: 53}]
endpoints: [{addresses: [198.18.1.1]}]
`))
	if err != nil || len(warnings) != 0 || len(objs.EndpointSlices) != 1 {
		t.Fatalf("Parse = %v, %v, %v", objs, warnings, err)
	}
	var got []string
	for _, p := range objs.EndpointSlices[0].Ports {
		if p.Name == nil || p.Protocol == nil {
			t.Fatalf("port %+v not defaulted", p)
		}
		got = append(got, fmt.Sprintf("%q/%s", *p.Name, *p.Protocol))
	}
	if want := []string{`""/TCP`, `"dns"/UDP`}; !slices.Equal(got, want) {
		t.Errorf("ports %v, want %v", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		input string
		// want are substrings of the error, in order.
		want []string
	}{{
		name:  "YAML syntax error names the document",
		input: svcWeb + "---\napiVersion: v1\nkind: Service\nmetadata: {name: b\n",
		want:  []string{"document 2: ", "yaml: line 3: did not find expected ',' or '}'"},
	}, {
		name:  "tab in indentation",
		input: nodeA + "---\n" + nodeA + "---\nkind: Node\nmetadata:\n  name: x\n\tlabels: {}\n",
		want:  []string{"document 3: ", "found a tab character"},
	}, {
		name:  "type mismatch names the Service",
		input: nodeA + "---\n" + strings.Replace(svcWeb, "port: 80", "port: eighty", 1),
		want:  []string{"document 2: Service ns/web: ", "cannot unmarshal string", "spec.ports.port"},
	}, {
		name:  "type mismatch without namespace names the default namespace",
		input: strings.Replace(strings.Replace(svcWeb, "port: 80", "port: eighty", 1), "  namespace: ns\n", "", 1),
		want:  []string{"document 1: Service default/web: "},
	}, {
		name:  "type mismatch in an EndpointSlice",
		input: strings.Replace(sliceWeb, "addresses: [198.18.1.1]", "addresses: 198.18.1.1", 1),
		want:  []string{"document 1: EndpointSlice ns/web-1: ", "cannot unmarshal string"},
	}, {
		name:  "type mismatch in a List item",
		input: "apiVersion: v1\nkind: List\nitems:\n" + indentItem(nodeA) + indentItem(strings.Replace(svcWeb, "port: 80", "port: eighty", 1)),
		want:  []string{"document 1: List item 1: Service ns/web: ", "cannot unmarshal string"},
	}, {
		name:  "type mismatch in the second JSON object",
		input: svcJSON + "\n" + strings.Replace(svcJSON, `"port": 443`, `"port": "https"`, 1),
		want:  []string{"document 1: JSON object 2: Service ns/api: ", "cannot unmarshal string"},
	}, {
		name:  "truncated second JSON object",
		input: svcJSON + "\n" + svcJSON[:40],
		want:  []string{"document 1: JSON object 2: ", "unexpected EOF"},
	}, {
		name:  "object without kind",
		input: "apiVersion: v1\nmetadata: {name: x}\n",
		want:  []string{"document 1: object without kind"},
	}, {
		name:  "a scalar is not an object",
		input: nodeA + "---\nhello\n",
		want:  []string{"document 2: not a Kubernetes object"},
	}, {
		name:  "a list is not an object",
		input: "- " + strings.ReplaceAll(nodeA, "\n", "\n  "),
		want:  []string{"document 1: not a Kubernetes object"},
	}, {
		name:  "metadata of the wrong type",
		input: "apiVersion: v1\nkind: Service\nmetadata:\n  name: [a, b]\n",
		want:  []string{"document 1: not a Kubernetes object"},
	}, {
		name:  "a key given twice",
		input: svcWeb + "metadata: {name: other}\n",
		want:  []string{"document 1: ", `key "metadata" already set`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, warnings, err := manifests.Parse([]byte(tt.input))
			if err == nil {
				t.Fatalf("Parse succeeded with %v, warnings %v; want an error", names(objs), warnings)
			}
			if objs != nil || warnings != nil {
				t.Errorf("Parse returned objects %v and warnings %v with the error", names(objs), warnings)
			}
			msg := err.Error()
			if strings.ContainsAny(msg, "\n\r") {
				t.Errorf("error %q spans several lines", msg)
			}
			if !strings.HasPrefix(msg, tt.want[0]) {
				t.Errorf("error %q does not start with %q", msg, tt.want[0])
			}
			rest := msg
			for _, sub := range tt.want {
				i := strings.Index(rest, sub)
				if i < 0 {
					t.Errorf("error %q does not contain %q (after the previous parts)", msg, sub)
					break
				}
				rest = rest[i+len(sub):]
			}
		})
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func service(name string) string { return strings.Replace(svcWeb, "name: web", "name: "+name, 1) }

func TestLoad(t *testing.T) {
	const broken = "kind: Service\nmetadata: {name: x\n"
	tests := []struct {
		name         string
		files        map[string]string
		path         string // relative to the directory; "" for the directory
		want         []string
		wantWarnings []string
	}{{
		name:  "one file",
		files: map[string]string{"all.yaml": svcWeb + "---\n" + sliceWeb, "other.yaml": broken},
		path:  "all.yaml",
		want:  []string{"Service ns/web", "EndpointSlice ns/web-1"},
	}, {
		name:  "a file of any name",
		files: map[string]string{"services.txt": svcWeb},
		path:  "services.txt",
		want:  []string{"Service ns/web"},
	}, {
		name: "directory: .yaml, .yml and .json in name order, not recursive",
		files: map[string]string{
			"b.yaml":          service("b"),
			"a.json":          strings.Replace(svcJSON, `"api"`, `"a"`, 1),
			"c.yml":           service("c") + "---\n" + configMap,
			"D.YAML":          service("d"),
			"0.yaml":          nodeA,
			"notes.txt":       broken,
			"README.md":       broken,
			"yaml":            broken,
			"sub/":            "",
			"sub/e.yaml":      broken,
			"dir.yaml/":       "",
			"dir.yaml/f.yaml": broken,
		},
		want:         []string{"Service ns/d", "Service ns/a", "Service ns/b", "Service ns/c", "Node node-a"},
		wantWarnings: []string{`ConfigMap ns/settings: apiVersion "v1" kind "ConfigMap" is not read: skipped`},
	}, {
		name:  "empty directory",
		files: map[string]string{"sub/": ""},
	}, {
		name:  "warnings of several files in order",
		files: map[string]string{"2.yaml": configMap, "1.yaml": strings.Replace(configMap, "settings", "first", 1)},
		wantWarnings: []string{
			`ConfigMap ns/first: apiVersion "v1" kind "ConfigMap" is not read: skipped`,
			`ConfigMap ns/settings: apiVersion "v1" kind "ConfigMap" is not read: skipped`,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			objs, warnings, err := manifests.Load(filepath.Join(dir, tt.path))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(tt.want, names(objs)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantWarnings, warningStrings(warnings)); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		path  string
		// wantPrefix starts the error.
		wantPrefix string
		wantIs     error
	}{{
		name:       "syntax error in a file names the file and the document",
		files:      map[string]string{"web.yaml": svcWeb + "---\nkind: Service\nmetadata: {name: x\n"},
		path:       "web.yaml",
		wantPrefix: "web.yaml: document 2: yaml: line 2:",
	}, {
		name: "error in one file of a directory names that file only",
		files: map[string]string{
			"a.yaml":   svcWeb,
			"b.yaml":   nodeA + "---\n" + strings.Replace(svcWeb, "port: 80", "port: eighty", 1),
			"c.yaml":   "kind: Service\nmetadata: {name: x\n",
			"ok.json":  svcJSON,
			"skip.txt": "{",
		},
		wantPrefix: "b.yaml: document 2: Service ns/web: json: cannot unmarshal string",
	}, {
		name:   "missing file",
		path:   "missing.yaml",
		wantIs: fs.ErrNotExist,
	}, {
		name:   "missing directory",
		path:   "nowhere/",
		wantIs: fs.ErrNotExist,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			path := filepath.Join(dir, tt.path)
			objs, warnings, err := manifests.Load(path)
			if err == nil {
				t.Fatalf("Load succeeded with %v, warnings %v", names(objs), warnings)
			}
			if objs != nil || warnings != nil {
				t.Errorf("Load returned objects %v and warnings %v with the error", names(objs), warnings)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Errorf("error %q spans several lines", err)
			}
			if tt.wantPrefix != "" && !strings.HasPrefix(err.Error(), tt.wantPrefix) {
				t.Errorf("error %q, want it to start with %q", err, tt.wantPrefix)
			}
			if tt.wantIs != nil {
				if !errors.Is(err, tt.wantIs) {
					t.Errorf("error %v is not %v", err, tt.wantIs)
				}
				if !strings.Contains(err.Error(), path) {
					t.Errorf("error %q does not name %s", err, path)
				}
			}
		})
	}
}

// The bundled demo manifests load without errors or warnings.
func TestLoadDemoManifests(t *testing.T) {
	objs, warnings, err := manifests.Load(filepath.Join("..", "examples", "demo", "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Errorf("warnings: %v", warnings)
	}
	if len(objs.Services) == 0 || len(objs.EndpointSlices) == 0 || len(objs.Nodes) == 0 {
		t.Errorf("got %d Services, %d EndpointSlices, %d Nodes; want some of each", len(objs.Services), len(objs.EndpointSlices), len(objs.Nodes))
	}
}

// TestFiles: a directory lists its YAML and JSON files in name order, not
// its other files nor its subdirectories; a file lists itself.
func TestFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"b.YML", "a.yaml", "c.json", "notes.txt", "a.yaml.swp"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		want []string
	}{
		{dir, []string{"a.yaml", "b.YML", "c.json"}},
		{filepath.Join(dir, "notes.txt"), []string{"notes.txt"}},
	} {
		files, err := manifests.Files(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range files {
			got = append(got, strings.TrimPrefix(f, dir+string(filepath.Separator)))
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Files(%s) (-want +got):\n%s", tt.path, diff)
		}
	}
	if _, err := manifests.Files(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Files of a missing path: error %v, want not exist", err)
	}
}
