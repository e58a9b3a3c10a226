// Package manifests reads Services, EndpointSlices, Nodes and ServiceCIDRs
// from YAML or JSON files, the input of the reference proxies' --manifests
// flag, as the state.Objects that state.State.Replace takes.
//
// A file may hold several YAML documents, JSON objects, and `kind: List`
// objects whose items are read in turn. A directory is read file by file
// (*.yaml, *.yml, *.json, in name order, not recursively). A file that cannot
// be parsed, or an object that does not decode into its kind, is an error
// naming the file and, where it can, the object: the caller must not apply
// anything from a half-read input. Objects of other kinds are skipped with a
// warning; objects whose contents are wrong (a bad IP, say) decode fine here
// and are reported later by servicemap and endpoints.
//
// # Watching
//
// A Watcher follows a path: Poll stats it and says when a change has
// settled (the files stayed the same for a settle interval, so that a file
// being written is not read half-way), Read parses it again only when its
// contents changed, and reports the same broken contents once, and Losses
// names the files that lost most of their objects. Watch is the loop an
// embedder runs on a goroutine: it calls back with each new Input or error.
//
// # Limitations
//
// It reads files, not an API server; a Watcher polls them, it is not told
// of changes. It does not apply the API server's validation, nor its
// defaulting but for an EndpointSlice port's name ("") and protocol (TCP),
// which every slice kube-proxy reads has (package endpoints, as
// kube-proxy, skips a port without a name); servicemap and endpoints
// decide what is usable.
package manifests

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/state"
)

// Load reads the file or directory at path: the files that Files lists.
// The objects are in the order read, and never nil.
func Load(path string) (*state.Objects, []svcproxy.Warning, error) {
	files, err := Files(path)
	if err != nil {
		return nil, nil, err
	}
	objs := &state.Objects{}
	var warnings []svcproxy.Warning
	for _, f := range files {
		w, err := parseFile(objs, f, nil)
		if err != nil {
			return nil, nil, err
		}
		warnings = append(warnings, w...)
	}
	return objs, warnings, nil
}

// parseFile appends the objects of file f to o, reading it as a stream
// (never whole), and everything it reads to read when not nil. An error
// of parsing names the file.
func parseFile(o *state.Objects, f string, read io.Writer) ([]svcproxy.Warning, error) {
	file, err := os.Open(f)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var r io.Reader = file
	if read != nil {
		r = io.TeeReader(file, read)
	}
	w, err := parse(o, r, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Base(f), err)
	}
	return w, nil
}

// Files lists the files that Load reads at path: path itself when it is
// not a directory; else the directory's *.yaml, *.yml and *.json files (any
// case), in name order, not recursively.
func Files(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	}
	slices.Sort(files)
	return files, nil
}

// Parse reads the objects in data, one file's contents.
func Parse(data []byte) (*state.Objects, []svcproxy.Warning, error) {
	objs := &state.Objects{}
	w, err := parse(objs, bytes.NewReader(data), nil, nil)
	if err != nil {
		return nil, nil, err
	}
	return objs, w, nil
}

// header is the part of an object that says what it is.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"metadata"`
	Items []json.RawMessage `json:"items"`
}

// parse appends the objects that r holds, one file's contents, to o. It
// reads one document at a time, into one buffer: what it holds at once
// beyond the objects is one document and what that document makes. When
// next is not nil it records there what each document made, by the hash of
// its bytes, and a document that prev (which may be nil) records is not
// decoded again: its objects, the same pointers, are appended. An
// EndpointSlice that is decoded shares what it has equal with the one of
// the same name prev holds (shareEndpointSlice).
func parse(o *state.Objects, r io.Reader, prev, next docCache) ([]svcproxy.Warning, error) {
	reader := newDocReader(r)
	var warnings []svcproxy.Warning
	var previous map[objectName]*discovery.EndpointSlice // prev's, once needed
	for doc := 1; ; doc++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return warnings, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		if next == nil {
			w, err := document(o, raw, doc)
			if err != nil {
				return nil, err
			}
			warnings = append(warnings, w...)
			continue
		}
		key := docKeyOf(raw)
		d, ok := prev[key]
		if !ok {
			d = &docRead{}
			if d.warnings, err = document(&d.objs, raw, doc); err != nil {
				return nil, err
			}
			if len(d.objs.EndpointSlices) > 0 && previous == nil {
				previous = prev.endpointSlices()
			}
			for _, es := range d.objs.EndpointSlices {
				shareEndpointSlice(es, previous[objectName{es.Namespace, es.Name}])
			}
		}
		next[key] = d
		o.Services = append(o.Services, d.objs.Services...)
		o.EndpointSlices = append(o.EndpointSlices, d.objs.EndpointSlices...)
		o.Nodes = append(o.Nodes, d.objs.Nodes...)
		o.ServiceCIDRs = append(o.ServiceCIDRs, d.objs.ServiceCIDRs...)
		warnings = append(warnings, d.warnings...)
	}
}

// docCache is what the documents of a file made, by the hash of their
// bytes (docKeyOf), for the next parse of the file to reuse.
type docCache map[docKey]*docRead

// objectName is an object's namespace and name.
type objectName struct{ namespace, name string }

// endpointSlices are the EndpointSlices that c's documents made, by
// name.
func (c docCache) endpointSlices() map[objectName]*discovery.EndpointSlice {
	byName := map[objectName]*discovery.EndpointSlice{}
	for _, d := range c {
		for _, es := range d.objs.EndpointSlices {
			byName[objectName{es.Namespace, es.Name}] = es
		}
	}
	return byName
}

// shareEndpointSlice makes es, just decoded, share with old (which may be
// nil), the EndpointSlice of the same namespace and name that the previous
// parse of the file made, what it has equal to it: its name and namespace,
// labels, annotations, address type and ports, and every endpoint equal to
// old's at the same index. A slice with one endpoint changed then holds
// little more than its list of endpoints and what changed, so that a
// reload that changes every slice of a file does not hold each twice while
// the previous objects are still in use. A Watcher's objects are not to be
// modified (Input), so sharing their parts is safe.
func shareEndpointSlice(es, old *discovery.EndpointSlice) {
	if old == nil {
		return
	}
	m, om := &es.ObjectMeta, &old.ObjectMeta
	m.Namespace, m.Name = om.Namespace, om.Name
	if reflect.DeepEqual(m.Labels, om.Labels) {
		m.Labels = om.Labels
	}
	if reflect.DeepEqual(m.Annotations, om.Annotations) {
		m.Annotations = om.Annotations
	}
	if es.AddressType == old.AddressType {
		es.AddressType = old.AddressType
	}
	if reflect.DeepEqual(es.Ports, old.Ports) {
		es.Ports = old.Ports
	}
	for i := range min(len(es.Endpoints), len(old.Endpoints)) {
		if reflect.DeepEqual(es.Endpoints[i], old.Endpoints[i]) {
			es.Endpoints[i] = old.Endpoints[i]
		}
	}
}

// docKey is the first 16 bytes of the SHA-256 of a document.
type docKey [16]byte

func docKeyOf(raw []byte) docKey {
	sum := sha256.Sum256(raw)
	return docKey(sum[:16])
}

// docRead is what one document made.
type docRead struct {
	objs     state.Objects
	warnings []svcproxy.Warning
}

// document appends the objects of raw, the doc'th document of a file, to
// o.
func document(o *state.Objects, raw []byte, doc int) ([]svcproxy.Warning, error) {
	values, err := jsonValues(raw)
	if err != nil {
		return nil, fmt.Errorf("document %d: %w", doc, err)
	}
	if values == nil {
		// Strict: a key given twice is an error, as for kubectl,
		// rather than the last one silently winning.
		js, err := yaml.YAMLToJSONStrict(raw)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, oneLine(err))
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			return nil, nil // a document holding only comments
		}
		values = [][]byte{js}
	}
	var warnings []svcproxy.Warning
	for i, js := range values {
		w, err := object(o, js, 0)
		if err != nil {
			if len(values) > 1 {
				return nil, fmt.Errorf("document %d: JSON object %d: %w", doc, i+1, err)
			}
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		warnings = append(warnings, w...)
	}
	return warnings, nil
}

// jsonValues splits a document that is a stream of JSON objects ("{…}
// {…}", as kubectl accepts) into its objects. It returns nil, nil when the
// document is not JSON, to be read as YAML; a YAML parser would read the
// first object of a stream and silently drop the others.
func jsonValues(raw []byte) ([][]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var values [][]byte
	for {
		var v json.RawMessage
		err := dec.Decode(&v)
		switch {
		case errors.Is(err, io.EOF):
			return values, nil
		case err != nil && len(values) == 0:
			return nil, nil // not JSON: a YAML flow mapping, say
		case err != nil:
			return nil, fmt.Errorf("JSON object %d: %w", len(values)+1, oneLine(err))
		}
		values = append(values, v)
	}
}

// object decodes one JSON object, descending into Lists.
func object(o *state.Objects, js []byte, depth int) ([]svcproxy.Warning, error) {
	var h header
	if err := json.Unmarshal(js, &h); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", oneLine(err))
	}
	name := h.Metadata.Name
	switch {
	case h.Metadata.Namespace != "":
		name = h.Metadata.Namespace + "/" + name
	case h.Kind == "Service" || h.Kind == "EndpointSlice":
		name = "default/" + name // the namespace it gets below
	}
	decode := func(into any) error {
		if err := json.Unmarshal(js, into); err != nil {
			return fmt.Errorf("%s %s: %w", h.Kind, name, oneLine(err))
		}
		return nil
	}
	switch {
	case strings.HasSuffix(h.Kind, "List") && depth == 0:
		var warnings []svcproxy.Warning
		for i, item := range h.Items {
			w, err := object(o, item, depth+1)
			if err != nil {
				return nil, fmt.Errorf("%s item %d: %w", h.Kind, i, err)
			}
			warnings = append(warnings, w...)
		}
		return warnings, nil
	case h.Kind == "Service" && h.APIVersion == "v1":
		svc := &v1.Service{}
		if err := decode(svc); err != nil {
			return nil, err
		}
		if svc.Namespace == "" {
			svc.Namespace = "default"
		}
		o.Services = append(o.Services, svc)
		return unallocated(svc), nil
	case h.Kind == "EndpointSlice" && h.APIVersion == "discovery.k8s.io/v1":
		es := &discovery.EndpointSlice{}
		if err := decode(es); err != nil {
			return nil, err
		}
		if es.Namespace == "" {
			es.Namespace = "default"
		}
		defaultPorts(es)
		o.EndpointSlices = append(o.EndpointSlices, es)
	case h.Kind == "Node" && h.APIVersion == "v1":
		node := &v1.Node{}
		if err := decode(node); err != nil {
			return nil, err
		}
		o.Nodes = append(o.Nodes, node)
	case h.Kind == "ServiceCIDR" && h.APIVersion == "networking.k8s.io/v1":
		sc := &networkingv1.ServiceCIDR{}
		if err := decode(sc); err != nil {
			return nil, err
		}
		o.ServiceCIDRs = append(o.ServiceCIDRs, sc)
	case h.Kind == "":
		return nil, errors.New("object without kind")
	default:
		return []svcproxy.Warning{{
			Kind: h.Kind, Namespace: h.Metadata.Namespace, Name: h.Metadata.Name,
			Reason: fmt.Sprintf("apiVersion %q kind %q is not read: skipped", h.APIVersion, h.Kind),
		}}, nil
	}
	return nil, nil
}

// unallocated warns about what an API server would have filled in a
// Service and a file leaves out: its ports (a Service that is not headless
// has some), and the node port of each port of a NodePort Service, or of a
// LoadBalancer one that allocates node ports.
func unallocated(svc *v1.Service) []svcproxy.Warning {
	report := svcproxy.Reporter{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name}
	spec := &svc.Spec
	if len(spec.Ports) == 0 && spec.ClusterIP != v1.ClusterIPNone && spec.Type != v1.ServiceTypeExternalName {
		report.Warnf("no ports: nothing is served")
	}
	allocates := spec.Type == v1.ServiceTypeNodePort ||
		spec.Type == v1.ServiceTypeLoadBalancer && (spec.AllocateLoadBalancerNodePorts == nil || *spec.AllocateLoadBalancerNodePorts)
	for _, p := range spec.Ports {
		if allocates && p.NodePort == 0 {
			report.Warnf("port %q: type %s without a nodePort: no node port is served", p.Name, spec.Type)
		}
	}
	return report.Warnings
}

// oneLine flattens an error message onto one line.
func oneLine(err error) error {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	return errors.New(msg)
}

// defaultPorts gives es's ports without a name or protocol the API
// server's defaults: "" and TCP.
func defaultPorts(es *discovery.EndpointSlice) {
	for i := range es.Ports {
		p := &es.Ports[i]
		if p.Name == nil {
			p.Name = new(string)
		}
		if p.Protocol == nil {
			tcp := v1.ProtocolTCP
			p.Protocol = &tcp
		}
	}
}
