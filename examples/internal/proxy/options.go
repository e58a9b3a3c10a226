package proxy

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/conntrack"
	"github.com/svcproxy/svcproxy/manifests"
)

// Options are the reference proxies' flags (see docs/reference-proxies.md).
type Options struct {
	Manifests    string
	Kubeconfig   string
	NodeName     string
	ClusterCIDRs []netip.Prefix
	NodeIPs      []netip.Addr
	// NodePortAddresses is kube-proxy's --nodeport-addresses: CIDRs and
	// the keywords primary, localhost and all; unset, the mode's default
	// (all for iptables, primary for nftables). Excludes NodeIPs.
	NodePortAddresses []string
	// BindAddress is kube-proxy's --bind-address: when not unspecified,
	// the node's primary address of its family.
	BindAddress netip.Addr
	// LogFormat is kube-proxy's logging format, "text" or "json"
	// (--logging-format, or the --config file's logging.format).
	LogFormat string
	// ConfigFile is kube-proxy's --config, whose settings are in these
	// Options; Notices are what to log about it at start.
	ConfigFile string
	Notices    []string
	// MasqueradeMark is the single-bit masquerade mark (kube-proxy's
	// masqueradeBit); 0 means ruleset.DefaultMasqueradeMark.
	MasqueradeMark uint32
	// Conntrack, when set (by --config or a --conntrack-* flag), is the
	// conntrack table size and timeouts the proxy sets at start.
	Conntrack *conntrack.Sizing
	// TCPBeLiberal is nf_conntrack_tcp_be_liberal as the proxy reads it
	// at start, once Conntrack is applied, as kube-proxy does: when set,
	// the iptables proxy does not drop INVALID packets. --dry-run, which
	// reads no sysctl, takes Conntrack's.
	TCPBeLiberal   bool
	IPFamily       string
	MasqueradeAll  bool
	SyncPeriod     time.Duration
	MinSyncPeriod  time.Duration
	Once           bool
	DryRun         bool
	Cleanup        bool
	MetricsAddress string
	HealthzAddress string
	// Profiling serves Go's profiles (net/http/pprof) under /debug/pprof/
	// on MetricsAddress, as kube-proxy's enableProfiling.
	Profiling bool
	// AllowedExternalIPs restricts the externalIPs served to these
	// networks; empty means not restricted.
	AllowedExternalIPs []netip.Prefix
	// ServiceCIDRs are the cluster's Service ranges (at most one per
	// family), besides those of ServiceCIDR objects.
	ServiceCIDRs []netip.Prefix
	// LocalhostNodePorts serves NodePorts on 127.0.0.1 (IPv4), as
	// kube-proxy's iptables mode does by default; only the iptables proxy
	// has the flag.
	LocalhostNodePorts bool
	// NFTablesLayout is the nftables proxy's table layout: "kube-proxy"
	// (the default) or "flat"; only the nftables proxy has the flag.
	NFTablesLayout string
	// ManifestMaxFileSize is the largest manifest file read, in bytes
	// (manifests.Watcher.MaxFileSize); 0 or less means no limit.
	ManifestMaxFileSize int64
	// Cgroup and BPFPinPath are the eBPF proxy's: the cgroup v2 directory
	// its programs attach to, and the bpffs directory where its maps and
	// links are pinned ("": not pinned); only the eBPF proxy has the
	// flags.
	Cgroup     string
	BPFPinPath string
	// TCExternal and TCPods are the eBPF proxy's interfaces for its tc
	// programs: those traffic from outside arrives on, those that lead to
	// the endpoints.
	TCExternal, TCPods []string
}

// ParseOptions parses the command line (without the program name).
func ParseOptions(name string, args []string, stderr io.Writer) (*Options, error) {
	o := &Options{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	hostname, _ := os.Hostname()
	var clusterCIDRs, nodeIPs, allowedExternalIPs, serviceCIDRs string
	fs.StringVar(&o.Manifests, "manifests", "", "YAML or JSON file, or directory of them, holding Services, EndpointSlices and Nodes (watched for changes)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig of an API server to watch instead of --manifests")
	fs.StringVar(&o.NodeName, "node-name", hostname, "this node's name")
	fs.StringVar(&serviceCIDRs, "service-cluster-ip-range", "", "Service CIDRs, comma-separated, one per family: the nftables proxy drops traffic to their unallocated addresses (with --kubeconfig, ServiceCIDR objects add theirs)")
	fs.StringVar(&clusterCIDRs, "cluster-cidr", "", "pod CIDRs, comma-separated, one per family: traffic to cluster IPs from outside them is masqueraded")
	fs.StringVar(&nodeIPs, "node-ip", "", "addresses on which NodePorts and health check node ports are served, comma-separated (default: the node's addresses)")
	fs.StringVar(&allowedExternalIPs, "allowed-external-ips", "", "CIDRs, comma-separated: Services' externalIPs outside them are not served (default: not restricted)")
	fs.StringVar(&o.IPFamily, "ip-family", "", "ipv4, ipv6 or dual (default: the families the node has)")
	fs.BoolVar(&o.MasqueradeAll, "masquerade-all", false, "SNAT all Service traffic")
	fs.DurationVar(&o.SyncPeriod, "sync-period", 30*time.Second, "full resync at least this often")
	fs.DurationVar(&o.MinSyncPeriod, "min-sync-period", time.Second, "never two syncs closer than this")
	fs.BoolVar(&o.Once, "once", false, "sync once and exit")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print what would be applied, change nothing")
	fs.BoolVar(&o.Cleanup, "cleanup", false, "remove everything this proxy owns and exit")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", "127.0.0.1:10249", "address of /metrics and /proxyMode (\"\" = off)")
	fs.StringVar(&o.HealthzAddress, "healthz-bind-address", "0.0.0.0:10256", "address of /healthz (\"\" = off)")
	if name == "iptables-proxy" {
		fs.BoolVar(&o.LocalhostNodePorts, "iptables-localhost-nodeports", true, "serve NodePorts on 127.0.0.1 too (IPv4; sets net.ipv4.conf.all.route_localnet=1)")
	}
	if name == "nftables-proxy" {
		fs.StringVar(&o.NFTablesLayout, "nftables-layout", "kube-proxy", "table layout: kube-proxy (kube-proxy's chains, table kube-proxy) or flat (sets and maps under a fixed number of rules, table svcproxy-flat)")
	}
	fs.Int64Var(&o.ManifestMaxFileSize, "manifest-max-file-size", manifests.DefaultMaxFileSize, "largest manifest file read, in bytes; a larger one is refused with an error (0: no limit)")
	if name == "ebpf-proxy" {
		fs.StringVar(&o.Cgroup, "cgroup", "", "cgroup v2 directory the programs attach to: the sockets of its processes are translated (a node passes the root of its cgroup v2 tree)")
		fs.StringVar(&o.BPFPinPath, "bpf-pin-path", "/sys/fs/bpf/svcproxy", "bpffs directory where the maps and links are pinned, so that they outlive the proxy (\"\": not pinned, detached at exit)")
		fs.Func("tc-external", "interfaces, comma-separated, on which traffic from outside arrives: with --tc-pods, tc programs translate it (IPv4 and IPv6)", func(v string) error {
			o.TCExternal = strings.FieldsFunc(v, func(r rune) bool { return r == ',' })
			return nil
		})
		fs.Func("tc-pods", "interfaces, comma-separated, that lead to the endpoints (see --tc-external)", func(v string) error {
			o.TCPods = strings.FieldsFunc(v, func(r rune) bool { return r == ',' })
			return nil
		})
	}
	kp := addKubeProxyFlags(fs)
	logging := addLoggingFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := kp.apply(fs, o, strings.TrimSuffix(name, "-proxy"), &clusterCIDRs); err != nil {
		return nil, err
	}
	if err := logging.apply(fs, kp.fileLogging, o); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	switch o.NFTablesLayout {
	case "", "kube-proxy", "flat":
	default:
		return nil, fmt.Errorf("--nftables-layout: %q is not kube-proxy or flat", o.NFTablesLayout)
	}
	if err := o.parseAddresses(clusterCIDRs, nodeIPs, allowedExternalIPs, serviceCIDRs); err != nil {
		return nil, err
	}
	if o.Cleanup {
		return o, nil
	}
	if o.Manifests != "" && o.Kubeconfig != "" || o.Manifests == "" && o.Kubeconfig == "" && o.ConfigFile == "" {
		return nil, errors.New("exactly one of --manifests and --kubeconfig is needed (with --config, the file's clientConnection.kubeconfig; none there means the in-cluster configuration)")
	}
	if o.Once && o.DryRun {
		return nil, errors.New("--once and --dry-run exclude each other")
	}
	if o.NodeName == "" {
		return nil, errors.New("--node-name is empty and the hostname is unknown")
	}
	if o.SyncPeriod <= 0 || o.MinSyncPeriod < 0 || o.MinSyncPeriod > o.SyncPeriod {
		return nil, fmt.Errorf("need 0 <= --min-sync-period (%v) <= --sync-period (%v), sync-period > 0", o.MinSyncPeriod, o.SyncPeriod)
	}
	return o, nil
}

// parseAddresses parses and checks the flags that hold addresses, and
// --ip-family, which they must agree with.
func (o *Options) parseAddresses(clusterCIDRs, nodeIPs, allowedExternalIPs, serviceCIDRs string) error {
	switch o.IPFamily {
	case "", "ipv4", "ipv6", "dual":
	default:
		return fmt.Errorf("--ip-family: %q is not ipv4, ipv6 or dual", o.IPFamily)
	}
	var err error
	if o.ClusterCIDRs, err = parseList(clusterCIDRs, parseMaskedPrefix); err != nil {
		return fmt.Errorf("--cluster-cidr: %w", err)
	}
	if err := onePerFamily(o.ClusterCIDRs); err != nil {
		return fmt.Errorf("--cluster-cidr: %w", err)
	}
	if o.NodeIPs, err = parseList(nodeIPs, parseNodeIP); err != nil {
		return fmt.Errorf("--node-ip: %w", err)
	}
	for _, a := range o.NodeIPs {
		if !o.servesFamily(a) {
			return fmt.Errorf("--node-ip: %s is not of --ip-family %s", a, o.IPFamily)
		}
	}
	if o.AllowedExternalIPs, err = parseList(allowedExternalIPs, parseMaskedPrefix); err != nil {
		return fmt.Errorf("--allowed-external-ips: %w", err)
	}
	if o.ServiceCIDRs, err = parseList(serviceCIDRs, parseMaskedPrefix); err != nil {
		return fmt.Errorf("--service-cluster-ip-range: %w", err)
	}
	if err := onePerFamily(o.ServiceCIDRs); err != nil {
		return fmt.Errorf("--service-cluster-ip-range: %w", err)
	}
	return nil
}

// parseNodeIP parses an address that can serve NodePorts: unicast, without
// a zone; an IPv4-mapped IPv6 address is the IPv4 address it holds.
func parseNodeIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Addr{}, err
	case a.Zone() != "":
		return netip.Addr{}, fmt.Errorf("%s has a zone: NodePorts are served on addresses without one", s)
	case a.IsUnspecified() || a.IsMulticast():
		return netip.Addr{}, fmt.Errorf("%s is not a unicast address", s)
	}
	return a.Unmap(), nil
}

func parseMaskedPrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	return p.Masked(), err
}

// onePerFamily reports a second prefix of one family.
func onePerFamily(prefixes []netip.Prefix) error {
	var seen4, seen6 bool
	for _, p := range prefixes {
		seen := &seen6
		if p.Addr().Is4() {
			seen = &seen4
		}
		if *seen {
			return fmt.Errorf("%s: at most one CIDR per IP family", p)
		}
		*seen = true
	}
	return nil
}

// servesFamily reports whether --ip-family allows a's family; when it is
// not set, it allows both.
func (o *Options) servesFamily(a netip.Addr) bool {
	switch o.IPFamily {
	case "ipv4":
		return a.Is4()
	case "ipv6":
		return !a.Is4()
	}
	return true
}

func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// families decides the IP families to serve: the flag, else the families of
// the node's addresses (dual when it has both), else IPv4.
func (o *Options) families(nodeAddrs []netip.Addr) []v1.IPFamily {
	switch o.IPFamily {
	case "ipv4":
		return []v1.IPFamily{v1.IPv4Protocol}
	case "ipv6":
		return []v1.IPFamily{v1.IPv6Protocol}
	case "dual":
		return []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	}
	var has4, has6 bool
	for _, a := range nodeAddrs {
		has4 = has4 || a.Is4()
		has6 = has6 || a.Is6()
	}
	switch {
	case has4 && has6:
		return []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	case has6:
		return []v1.IPFamily{v1.IPv6Protocol}
	}
	return []v1.IPFamily{v1.IPv4Protocol}
}
