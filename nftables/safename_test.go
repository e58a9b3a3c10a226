package nftables

import (
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/internal/testkit/scaleworld"
	"github.com/svcproxy/svcproxy/ruleset"
)

// The same for kube-proxy's layout: the whole table's render warns about a
// Service port whose name names.Safe refuses and writes nothing of it, and
// writes the ports around it.
func TestFullSkipsUnsafeNames(t *testing.T) {
	rs := scaleworld.New(scalegen.Spec{Services: 2}).Ruleset
	r, err := newRenderer(rs.Config(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad := *rs.Services()[0]
	port := *bad.ServicePort
	port.Name.Namespace = "B_ad"
	bad.ServicePort = &port
	var res Result
	tx := knftables.NewFake(knftables.IPv4Family, DefaultTable).NewTransaction()
	st := newFullState(r, rs, &res, func(string) bool { return false }, false)
	st.services(r.knftWriter(tx), []*ruleset.Service{rs.Services()[0], &bad, rs.Services()[1]})
	text := tx.String()
	if strings.Contains(text, "B_ad") {
		t.Errorf("the unsafe port is rendered:\n%s", text)
	}
	for _, s := range rs.Services() {
		if !strings.Contains(text, s.Name.Namespace+"/"+s.Name.Name) {
			t.Errorf("%v is not rendered", s.Name)
		}
	}
	if len(res.Warnings) != 1 || res.Warnings[0].Namespace != "B_ad" {
		t.Errorf("warnings %v, want one about B_ad", res.Warnings)
	}
}
