package servicemap_test

import (
	"testing"

	k8slabels "k8s.io/apimachinery/pkg/labels"

	"github.com/svcproxy/svcproxy/servicemap"
)

// TestLabelSelectorAgreesWithSelects: the selector an API server is sent
// takes exactly the label sets Selects takes, for the default Filter and
// for a proxy name; the selector's text is the documented one.
func TestLabelSelectorAgreesWithSelects(t *testing.T) {
	const name, headless = servicemap.LabelServiceProxyName, servicemap.LabelHeadless
	labelSets := []map[string]string{
		nil,
		{},
		{"app": "web"},
		{name: "x"},
		{name: ""},
		{name: "other"},
		{name: "x", "app": "web"},
		{headless: ""},
		{headless: "", name: "x"},
		{headless: "true", "app": "web"},
		{"service.kubernetes.io/service-proxy-name-x": "x"},
	}
	for _, tt := range []struct {
		filter servicemap.Filter
		text   string
	}{
		{servicemap.Filter{}, "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name"},
		{servicemap.Filter{ProxyName: "x"}, "!service.kubernetes.io/headless,service.kubernetes.io/service-proxy-name=x"},
		{servicemap.Filter{ProxyName: "my-cni.example"}, "!service.kubernetes.io/headless,service.kubernetes.io/service-proxy-name=my-cni.example"},
	} {
		sel, err := tt.filter.LabelSelector()
		if err != nil {
			t.Fatalf("%+v: %v", tt.filter, err)
		}
		if sel.String() != tt.text {
			t.Errorf("%+v: selector %q, want %q", tt.filter, sel.String(), tt.text)
		}
		parsed, err := k8slabels.Parse(sel.String())
		if err != nil {
			t.Fatalf("%+v: selector %q does not parse: %v", tt.filter, sel.String(), err)
		}
		for _, set := range labelSets {
			selects, _ := tt.filter.Selects(set)
			if got := parsed.Matches(k8slabels.Set(set)); got != selects {
				t.Errorf("%+v, labels %v: selector %q matches %v, Selects says %v", tt.filter, set, sel.String(), got, selects)
			}
		}
	}
}

// TestLabelSelectorBadProxyName: a proxy name that no label can carry is an
// error, never a selector that would take everything.
func TestLabelSelectorBadProxyName(t *testing.T) {
	for _, name := range []string{"has space", "a,b", "-starts-with-dash", string(make([]byte, 64))} {
		if sel, err := (servicemap.Filter{ProxyName: name}).LabelSelector(); err == nil {
			t.Errorf("proxy name %q: selector %q, want an error", name, sel)
		}
	}
}
