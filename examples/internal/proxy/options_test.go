package proxy

import (
	"bytes"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

// TestAddressFlagsRefused: a bad address flag is a one-line error naming
// the flag and the value, and exit 2, before anything else happens.
func TestAddressFlagsRefused(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--node-ip", "fe80::1%veth0"}, "error: --node-ip: fe80::1%veth0 has a zone"},
		{[]string{"--node-ip", "198.18.0.1,nope"}, `error: --node-ip: ParseAddr("nope")`},
		{[]string{"--node-ip", "0.0.0.0"}, "error: --node-ip: 0.0.0.0 is not a unicast address"},
		{[]string{"--node-ip", "ff02::1"}, "error: --node-ip: ff02::1 is not a unicast address"},
		{[]string{"--node-ip", "2001:db8::1", "--ip-family", "ipv4"}, "error: --node-ip: 2001:db8::1 is not of --ip-family ipv4"},
		{[]string{"--node-ip", "198.18.0.1", "--ip-family", "ipv6"}, "error: --node-ip: 198.18.0.1 is not of --ip-family ipv6"},
		{[]string{"--cluster-cidr", "fe80::%eth0/64"}, "error: --cluster-cidr: "},
		{[]string{"--cluster-cidr", "198.18.0.0/16,10.0.0.0/8"}, "error: --cluster-cidr: 10.0.0.0/8: at most one CIDR per IP family"},
		{[]string{"--allowed-external-ips", "198.19.0.0/33"}, "error: --allowed-external-ips: "},
		{[]string{"--allowed-external-ips", "198.19.0.1"}, "error: --allowed-external-ips: "},
	} {
		var out, errs bytes.Buffer
		args := append([]string{"--manifests", t.TempDir(), "--node-name", "n1", "--once"}, tt.args...)
		code := Run(fakeMode(map[v1.IPFamily]*fakeBackend{}), args, &out, &errs)
		if code != 2 || !strings.HasPrefix(errs.String(), tt.want) || strings.Count(errs.String(), "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and one line starting %q", tt.args, code, errs.String(), tt.want)
		}
	}
}

// TestAddressFlagsParsed: addresses are unmapped, prefixes masked.
func TestAddressFlagsParsed(t *testing.T) {
	o, err := ParseOptions("test", []string{
		"--manifests", "m",
		"--node-ip", "198.18.0.1, ::ffff:198.18.0.2,2001:db8::1",
		"--cluster-cidr", "198.18.7.1/16,2001:db8:1::1/64",
		"--allowed-external-ips", "198.19.200.1/24,2001:db8:2::/64,198.19.201.0/24",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	type addressFlags struct {
		NodeIPs                          []netip.Addr
		ClusterCIDRs, AllowedExternalIPs []netip.Prefix
	}
	got := addressFlags{o.NodeIPs, o.ClusterCIDRs, o.AllowedExternalIPs}
	want := addressFlags{
		NodeIPs:            []netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("2001:db8::1")},
		ClusterCIDRs:       []netip.Prefix{netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("2001:db8:1::/64")},
		AllowedExternalIPs: []netip.Prefix{netip.MustParsePrefix("198.19.200.0/24"), netip.MustParsePrefix("2001:db8:2::/64"), netip.MustParsePrefix("198.19.201.0/24")},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("parsed flags (-want +got):\n%s", diff)
	}
}

// captureService has an externalIP that is the node's address: without
// --allowed-external-ips, it captures the node's port 80.
const captureService = `apiVersion: v1
kind: Service
metadata: {namespace: ns, name: capture}
spec:
  clusterIP: 198.19.0.2
  externalIPs: [198.18.0.10]
  ports: [{name: http, port: 80}]
`

// TestAllowedExternalIPs: with --allowed-external-ips, an externalIP outside
// the allowed networks (here the node's own address) is not served and a
// warning names the Service; without it, it is served.
func TestAllowedExternalIPs(t *testing.T) {
	warning := "Service ns/capture: externalIP 198.18.0.10 is not allowed: not served"
	for _, tt := range []struct {
		flags []string
		want  []netip.Addr
		warns bool
	}{
		{nil, []netip.Addr{netip.MustParseAddr("198.18.0.10")}, false},
		{[]string{"--allowed-external-ips", "198.19.200.0/24"}, nil, true},
		{[]string{"--allowed-external-ips", "198.18.0.0/24"}, []netip.Addr{netip.MustParseAddr("198.18.0.10")}, false},
	} {
		backends := map[v1.IPFamily]*fakeBackend{}
		dir := writeManifests(t, map[string]string{"svc.yaml": captureService})
		var out, errs bytes.Buffer
		args := append([]string{"--manifests", dir, "--node-name", "n1", "--node-ip", "198.18.0.10", "--once"}, tt.flags...)
		if code := Run(fakeMode(backends), args, &out, &errs); code != 0 {
			t.Fatalf("%q: exit %d, stderr: %s", tt.flags, code, errs.String())
		}
		if got := strings.Contains(errs.String(), warning); got != tt.warns {
			t.Errorf("%q: warning %q logged: %v, want %v; stderr:\n%s", tt.flags, warning, got, tt.warns, errs.String())
		}
		services := backends[v1.IPv4Protocol].synced[0].Services()
		if len(services) != 1 {
			t.Fatalf("%q: synced %d Services, want ns/capture", tt.flags, len(services))
		}
		if diff := cmp.Diff(tt.want, services[0].ExternalIPs, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("%q: externalIPs served (-want +got):\n%s", tt.flags, diff)
		}
	}
}

// TestNFTablesLayoutFlag: --nftables-layout is the nftables proxy's only,
// defaults to kube-proxy, and refuses other layouts with exit 2.
func TestNFTablesLayoutFlag(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string // the parsed layout, or the error's start
		ok   bool
	}{
		{name: "nftables-proxy", want: "kube-proxy", ok: true},
		{name: "nftables-proxy", args: []string{"--nftables-layout", "flat"}, want: "flat", ok: true},
		{name: "nftables-proxy", args: []string{"--nftables-layout", "chains"}, want: `--nftables-layout: "chains" is not kube-proxy or flat`},
		{name: "iptables-proxy", args: []string{"--nftables-layout", "flat"}, want: "flag provided but not defined: -nftables-layout"},
	} {
		o, err := ParseOptions(tt.name, append([]string{"--manifests", "m"}, tt.args...), io.Discard)
		switch {
		case tt.ok && (err != nil || o.NFTablesLayout != tt.want):
			t.Errorf("%s %q: layout %v, %v; want %q", tt.name, tt.args, o, err, tt.want)
		case !tt.ok && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
			t.Errorf("%s %q: %v; want an error starting %q", tt.name, tt.args, err, tt.want)
		}
	}
}
