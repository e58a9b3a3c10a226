package proxy

import (
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/svcproxy/svcproxy/conntrack"
)

// kubeadmConfig is the config.conf of the kube-proxy ConfigMap that kubeadm
// writes (every field, most at their zero value), with a cluster CIDR.
const kubeadmConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 198.18.64.0/18,2001:db8:18:40::/58
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: ""
mode: MODE
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
`

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// configOptions are the Options a configuration file sets.
type configOptions struct {
	NodeName, Kubeconfig, HealthzAddress, MetricsAddress string
	ClusterCIDRs                                         []netip.Prefix
	NodePortAddresses                                    []string
	BindAddress                                          netip.Addr
	MasqueradeAll, LocalhostNodePorts, Profiling         bool
	MasqueradeMark                                       uint32
	SyncPeriod, MinSyncPeriod                            time.Duration
	Conntrack                                            *conntrack.Sizing
	Notices                                              []string
}

func configOptionsOf(o *Options) configOptions {
	return configOptions{o.NodeName, o.Kubeconfig, o.HealthzAddress, o.MetricsAddress, o.ClusterCIDRs, o.NodePortAddresses,
		o.BindAddress, o.MasqueradeAll, o.LocalhostNodePorts, o.Profiling, o.MasqueradeMark, o.SyncPeriod, o.MinSyncPeriod, o.Conntrack, o.Notices}
}

// TestKubeProxyConfigFile: kubeadm's kube-proxy configuration, read as
// kube-proxy 1.37 reads it (its defaults for what is left at zero), and
// settings of the file; kube-proxy's flags given beside --config are
// ignored with a notice, but --hostname-override and svcproxy's own flags.
func TestKubeProxyConfigFile(t *testing.T) {
	defaultSizing := conntrack.DefaultSizing()
	kubeadm := configOptions{
		NodeName: "n1", Kubeconfig: "/var/lib/kube-proxy/kubeconfig.conf",
		HealthzAddress: "0.0.0.0:10256", MetricsAddress: "127.0.0.1:10249",
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.64.0/18"), netip.MustParsePrefix("2001:db8:18:40::/58")},
		BindAddress:  netip.MustParseAddr("0.0.0.0"), LocalhostNodePorts: true,
		SyncPeriod: 30 * time.Second, MinSyncPeriod: time.Second, Conntrack: &defaultSizing,
	}
	for _, tt := range []struct {
		name   string
		proxy  string
		file   string
		flags  []string
		change func(*configOptions)
	}{
		{name: "kubeadm's, iptables", proxy: "iptables-proxy", file: strings.Replace(kubeadmConfig, "MODE", `""`, 1), flags: []string{"--node-name", "n1"}},
		{name: "kubeadm's, nftables", proxy: "nftables-proxy", file: strings.Replace(kubeadmConfig, "MODE", "nftables", 1), flags: []string{"--node-name", "n1"},
			change: func(c *configOptions) { c.LocalhostNodePorts, c.NodePortAddresses = false, []string{"primary"} }},
		{name: "settings", proxy: "nftables-proxy", file: `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: " Node-B "
bindAddress: 2001:db8::1
healthzBindAddress: "[2001:db8::1]"
metricsBindAddress: 0.0.0.0:10249
enableProfiling: true
nodePortAddresses: [198.18.0.0/24, primary]
detectLocalMode: ClusterCIDR
featureGates: {}
iptables: {masqueradeAll: false, syncPeriod: 1m}
nftables: {masqueradeAll: true, masqueradeBit: 3, syncPeriod: 10s, minSyncPeriod: 100ms}
conntrack: {maxPerCore: 0, tcpBeLiberal: true, udpTimeout: 30s}
`, change: func(c *configOptions) {
			*c = configOptions{NodeName: "node-b", HealthzAddress: "[2001:db8::1]:10256", MetricsAddress: "0.0.0.0:10249",
				NodePortAddresses: []string{"198.18.0.0/24", "primary"}, BindAddress: netip.MustParseAddr("2001:db8::1"),
				MasqueradeAll: true, Profiling: true, MasqueradeMark: 1 << 3, SyncPeriod: 10 * time.Second, MinSyncPeriod: 100 * time.Millisecond,
				Conntrack: &conntrack.Sizing{Min: conntrack.DefaultMin, TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour, UDPTimeout: 30 * time.Second, TCPBeLiberal: true}}
		}},
		{name: "kube-proxy's flags ignored, --hostname-override and svcproxy's own applied", proxy: "iptables-proxy",
			file:  strings.Replace(kubeadmConfig, "MODE", "iptables", 1),
			flags: []string{"--masquerade-all", "--cluster-cidr", "10.0.0.0/8", "--hostname-override", "Node-C", "--sync-period", "5s", "--profiling"},
			change: func(c *configOptions) {
				c.NodeName, c.SyncPeriod = "node-c", 5*time.Second
				c.Notices = []string{"--cluster-cidr is ignored: kube-proxy ignores it when --config is given; set it in CONFIG",
					"--masquerade-all is ignored: kube-proxy ignores it when --config is given; set it in CONFIG",
					"--profiling is ignored: kube-proxy ignores it when --config is given; set it in CONFIG"}
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.file)
			o, err := ParseOptions(tt.proxy, append([]string{"--config", path}, tt.flags...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			want := kubeadm
			if tt.change != nil {
				tt.change(&want)
			}
			for i := range want.Notices {
				want.Notices[i] = strings.Replace(want.Notices[i], "CONFIG", path, 1)
			}
			if diff := cmp.Diff(want, configOptionsOf(o), cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
				cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKubeProxyConfigRefused: what the file holds that kube-proxy would not
// read, or that the proxy does not serve, is a one-line error naming the
// field; nothing is ignored.
func TestKubeProxyConfigRefused(t *testing.T) {
	const head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	for _, tt := range []struct {
		proxy, file, want string
	}{
		{"iptables-proxy", head + "clusterCidr: 198.18.0.0/16\n", `unknown field "clusterCidr"`},
		{"iptables-proxy", head + "ClusterCIDR: 198.18.0.0/16\n", `unknown field "ClusterCIDR"`},
		{"iptables-proxy", head + "surprise: 1\n", `unknown field "surprise"`},
		{"iptables-proxy", head + "mode: iptables\nmode: nftables\n", `key "mode" already set`},
		{"iptables-proxy", "apiVersion: kubeproxy.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", `apiVersion "kubeproxy.config.k8s.io/v1beta1"`},
		{"iptables-proxy", head + "mode: ipvs\n", `mode: "ipvs" is not this proxy's mode, iptables`},
		{"nftables-proxy", head, `mode: unset, which is kube-proxy's iptables mode; this is the nftables proxy`},
		{"iptables-proxy", head + "detectLocalMode: NodeCIDR\n", `detectLocalMode: "NodeCIDR" is not supported`},
		{"iptables-proxy", head + "ipvs: {scheduler: rr}\n", `ipvs.scheduler: not supported by this proxy`},
		{"iptables-proxy", head + "featureGates: {KubeProxyNFTablesLocalhostNodePorts: true}\n", `featureGates: not supported`},
		{"iptables-proxy", head + "clientConnection: {qps: 50}\n", `clientConnection.qps: not supported`},
		{"iptables-proxy", head + "oomScoreAdj: -999\n", `oomScoreAdj: not supported`},
		{"iptables-proxy", head + "nodePortAddresses: [198.18.0.1]\n", `nodePortAddresses: "198.18.0.1" must be a CIDR`},
		{"iptables-proxy", head + "iptables: {masqueradeBit: 32}\n", `iptables.masqueradeBit: 32 is not within [0, 31]`},
		{"iptables-proxy", head + "conntrack: {udpTimeout: 10ms}\n", `conntrack: conntrack: UDPTimeout 10ms is not 0 or at least 1s`},
		{"iptables-proxy", head + "healthzBindAddress: nowhere\n", `healthzBindAddress: "nowhere" is neither`},
	} {
		path := writeConfig(t, tt.file)
		_, err := ParseOptions(tt.proxy, []string{"--config", path}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), path) {
			t.Errorf("%s with %q: error %v; want one line naming the file and %q", tt.proxy, tt.file, err, tt.want)
		}
	}
}

// TestKubeProxyFlags: kube-proxy's flags without --config.
func TestKubeProxyFlags(t *testing.T) {
	parse := func(proxy string, args ...string) (*Options, error) {
		return ParseOptions(proxy, append([]string{"--manifests", "m", "--node-name", "n1"}, args...), io.Discard)
	}
	o, err := parse("iptables-proxy", "--hostname-override", "N2", "--proxy-mode", "iptables", "--iptables-sync-period", "1m",
		"--iptables-min-sync-period", "2s", "--detect-local-mode", "ClusterCIDR", "--conntrack-tcp-be-liberal", "--profiling")
	if err != nil {
		t.Fatal(err)
	}
	want := conntrack.DefaultSizing()
	want.TCPBeLiberal = true
	if o.NodeName != "n2" || o.SyncPeriod != time.Minute || o.MinSyncPeriod != 2*time.Second || o.Conntrack == nil || *o.Conntrack != want || !o.Profiling {
		t.Errorf("node %q, sync periods %v %v, conntrack %+v, profiling %v", o.NodeName, o.SyncPeriod, o.MinSyncPeriod, o.Conntrack, o.Profiling)
	}
	if o, err := parse("nftables-proxy"); err != nil || o.Conntrack != nil || o.Profiling || !slicesEqual(o.NodePortAddresses, []string{"primary"}) {
		t.Errorf("nftables-proxy without kube-proxy's flags: %v, conntrack %+v, NodePort addresses %q; want no conntrack settings, primary", err, o.Conntrack, o.NodePortAddresses)
	}
	for _, tt := range []struct {
		proxy string
		args  []string
		want  string
	}{
		{"iptables-proxy", []string{"--proxy-mode", "nftables"}, `--proxy-mode: "nftables" is not this proxy's mode, iptables`},
		{"iptables-proxy", []string{"--detect-local-mode", "BridgeInterface"}, `--detect-local-mode: "BridgeInterface" is not supported`},
		{"iptables-proxy", []string{"--iptables-sync-period", "1m", "--sync-period", "1m"}, "--iptables-sync-period and --sync-period are one setting"},
		{"iptables-proxy", []string{"--hostname-override", " "}, "--hostname-override: empty"},
		{"iptables-proxy", []string{"--nodeport-addresses", "primary", "--node-ip", "198.18.0.1"}, "--node-ip and --nodeport-addresses exclude each other"},
		{"iptables-proxy", []string{"--nodeport-addresses", "all,nope"}, `--nodeport-addresses: "nope" must be a CIDR`},
	} {
		if _, err := parse(tt.proxy, tt.args...); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.args, err, tt.want)
		}
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }
