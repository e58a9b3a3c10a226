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
)

// Options are the reference proxies' flags (see docs/reference-proxies.md).
type Options struct {
	Manifests      string
	Kubeconfig     string
	NodeName       string
	ClusterCIDRs   []netip.Prefix
	NodeIPs        []netip.Addr
	IPFamily       string
	MasqueradeAll  bool
	SyncPeriod     time.Duration
	MinSyncPeriod  time.Duration
	Once           bool
	DryRun         bool
	Cleanup        bool
	MetricsAddress string
	HealthzAddress string
}

// ParseOptions parses the command line (without the program name).
func ParseOptions(name string, args []string, stderr io.Writer) (*Options, error) {
	o := &Options{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	hostname, _ := os.Hostname()
	var clusterCIDRs, nodeIPs string
	fs.StringVar(&o.Manifests, "manifests", "", "YAML or JSON file, or directory of them, holding Services, EndpointSlices and Nodes (watched for changes)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig of an API server to watch instead of --manifests")
	fs.StringVar(&o.NodeName, "node-name", hostname, "this node's name")
	fs.StringVar(&clusterCIDRs, "cluster-cidr", "", "pod CIDRs, comma-separated, one per family: traffic to cluster IPs from outside them is masqueraded")
	fs.StringVar(&nodeIPs, "node-ip", "", "addresses on which NodePorts are served, comma-separated (default: the node's addresses)")
	fs.StringVar(&o.IPFamily, "ip-family", "", "ipv4, ipv6 or dual (default: the families the node has)")
	fs.BoolVar(&o.MasqueradeAll, "masquerade-all", false, "SNAT all Service traffic")
	fs.DurationVar(&o.SyncPeriod, "sync-period", 30*time.Second, "full resync at least this often")
	fs.DurationVar(&o.MinSyncPeriod, "min-sync-period", time.Second, "never two syncs closer than this")
	fs.BoolVar(&o.Once, "once", false, "sync once and exit")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print what would be applied, change nothing")
	fs.BoolVar(&o.Cleanup, "cleanup", false, "remove everything this proxy owns and exit")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", "127.0.0.1:10249", "address of /metrics and /proxyMode (\"\" = off)")
	fs.StringVar(&o.HealthzAddress, "healthz-bind-address", "0.0.0.0:10256", "address of /healthz (\"\" = off)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var err error
	if o.ClusterCIDRs, err = parseList(clusterCIDRs, netip.ParsePrefix); err != nil {
		return nil, fmt.Errorf("--cluster-cidr: %w", err)
	}
	for i, p := range o.ClusterCIDRs {
		o.ClusterCIDRs[i] = p.Masked()
	}
	if o.NodeIPs, err = parseList(nodeIPs, netip.ParseAddr); err != nil {
		return nil, fmt.Errorf("--node-ip: %w", err)
	}
	switch o.IPFamily {
	case "", "ipv4", "ipv6", "dual":
	default:
		return nil, fmt.Errorf("--ip-family: %q is not ipv4, ipv6 or dual", o.IPFamily)
	}
	if o.Cleanup {
		return o, nil
	}
	if (o.Manifests == "") == (o.Kubeconfig == "") {
		return nil, errors.New("exactly one of --manifests and --kubeconfig is needed")
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
