package proxy

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"time"

	logsapi "k8s.io/component-base/logs/api/v1"
	kpconfig "k8s.io/kube-proxy/config/v1alpha1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/conntrack"
)

// kubeProxyFlags are kube-proxy's flags that the reference proxies take
// under kube-proxy's names (docs/reference-proxies.md), besides those they
// share with it (--kubeconfig, --cluster-cidr, --masquerade-all,
// --healthz-bind-address, --metrics-bind-address,
// --iptables-localhost-nodeports, --cleanup).
type kubeProxyFlags struct {
	config                                    string
	hostnameOverride                          string
	proxyMode                                 string
	nodePortAddresses                         string
	bindAddress                               string
	detectLocalMode                           string
	iptablesSyncPeriod, iptablesMinSyncPeriod time.Duration
	conntrackMaxPerCore, conntrackMin         int
	conntrackTCPEstablished, conntrackTCPWait time.Duration
	conntrackUDP, conntrackUDPStream          time.Duration
	conntrackTCPBeLiberal                     bool
	profiling                                 bool
	// fileLogging is the --config file's logging section, once read.
	fileLogging *logsapi.LoggingConfiguration
}

// kubeProxyOnlyFlags are the flags of kube-proxy that kube-proxy ignores
// when --config is given (all but --hostname-override, --config and
// --cleanup).
var kubeProxyOnlyFlags = []string{
	"kubeconfig", "cluster-cidr", "masquerade-all", "healthz-bind-address", "metrics-bind-address",
	"iptables-localhost-nodeports", "proxy-mode", "nodeport-addresses", "bind-address", "detect-local-mode",
	"iptables-sync-period", "iptables-min-sync-period", "conntrack-max-per-core", "conntrack-min",
	"conntrack-tcp-timeout-established", "conntrack-tcp-timeout-close-wait", "conntrack-tcp-be-liberal",
	"conntrack-udp-timeout", "conntrack-udp-timeout-stream", "profiling",
}

// addKubeProxyFlags registers kube-proxy's flags on fs.
func addKubeProxyFlags(fs *flag.FlagSet) *kubeProxyFlags {
	k := &kubeProxyFlags{}
	fs.StringVar(&k.config, "config", "", "kube-proxy's: its configuration file (kubeproxy.config.k8s.io/v1alpha1 KubeProxyConfiguration); as in kube-proxy, kube-proxy's other flags but --hostname-override are then ignored (with a warning)")
	fs.StringVar(&k.hostnameOverride, "hostname-override", "", "kube-proxy's: this node's name (as --node-name; overrides the file's hostnameOverride)")
	fs.StringVar(&k.proxyMode, "proxy-mode", "", "kube-proxy's: must be this proxy's mode (iptables or nftables)")
	fs.StringVar(&k.nodePortAddresses, "nodeport-addresses", "", "kube-proxy's: CIDRs and the keywords primary (the node's primary addresses), localhost and all, comma-separated: NodePorts are served on the node's addresses inside them (default: all for iptables-proxy, primary for nftables-proxy; excludes --node-ip)")
	fs.StringVar(&k.bindAddress, "bind-address", "0.0.0.0", "kube-proxy's: when not 0.0.0.0 or ::, the node's primary address of its family (for --nodeport-addresses primary)")
	fs.StringVar(&k.detectLocalMode, "detect-local-mode", "", "kube-proxy's: ClusterCIDR (the only mode served: --cluster-cidr)")
	fs.DurationVar(&k.iptablesSyncPeriod, "iptables-sync-period", 0, "kube-proxy's name of --sync-period")
	fs.DurationVar(&k.iptablesMinSyncPeriod, "iptables-min-sync-period", 0, "kube-proxy's name of --min-sync-period")
	fs.IntVar(&k.conntrackMaxPerCore, "conntrack-max-per-core", conntrack.DefaultMaxPerCore, "kube-proxy's: conntrack entries per CPU (0: leave the table size alone); any --conntrack-* flag, or --config, makes the proxy set the conntrack sysctls as kube-proxy does")
	fs.IntVar(&k.conntrackMin, "conntrack-min", conntrack.DefaultMin, "kube-proxy's: at least this many conntrack entries")
	fs.DurationVar(&k.conntrackTCPEstablished, "conntrack-tcp-timeout-established", conntrack.DefaultTCPEstablishedTimeout, "kube-proxy's: idle timeout of established TCP connections (0: leave it)")
	fs.DurationVar(&k.conntrackTCPWait, "conntrack-tcp-timeout-close-wait", conntrack.DefaultTCPCloseWaitTimeout, "kube-proxy's: timeout of TCP connections in CLOSE_WAIT (0: leave it)")
	fs.BoolVar(&k.conntrackTCPBeLiberal, "conntrack-tcp-be-liberal", false, "kube-proxy's: set nf_conntrack_tcp_be_liberal")
	fs.DurationVar(&k.conntrackUDP, "conntrack-udp-timeout", 0, "kube-proxy's: idle timeout of UNREPLIED UDP flows (0: leave it)")
	fs.DurationVar(&k.conntrackUDPStream, "conntrack-udp-timeout-stream", 0, "kube-proxy's: idle timeout of ASSURED UDP flows (0: leave it)")
	fs.BoolVar(&k.profiling, "profiling", false, "kube-proxy's: serve Go's profiles under /debug/pprof/ beside /metrics")
	return k
}

// apply completes o, for the proxy whose mode is mode ("iptables" or
// "nftables"), from kube-proxy's flags and, with --config, from the file,
// once fs is parsed. clusterCIDRs is --cluster-cidr's text, which the file
// may set.
func (k *kubeProxyFlags) apply(fs *flag.FlagSet, o *Options, mode string, clusterCIDRs *string) error {
	set := func(name string) bool { return explicitlySet(fs, name) }
	if k.config != "" {
		o.ConfigFile = k.config
		for _, name := range kubeProxyOnlyFlags {
			if set(name) {
				o.Notices = append(o.Notices, fmt.Sprintf("--%s is ignored: kube-proxy ignores it when --config is given; set it in %s", name, k.config))
			}
		}
		flags := *o
		cfg, err := o.readKubeProxyConfig(k.config, mode, clusterCIDRs)
		if err != nil {
			return err
		}
		k.fileLogging = &cfg.Logging
		// svcproxy's own flags apply over the file.
		if set("node-name") {
			o.NodeName = flags.NodeName
		}
		if set("sync-period") {
			o.SyncPeriod = flags.SyncPeriod
		}
		if set("min-sync-period") {
			o.MinSyncPeriod = flags.MinSyncPeriod
		}
	} else if err := k.applyFlags(set, o, mode); err != nil {
		return err
	}
	if set("hostname-override") {
		h := strings.ToLower(strings.TrimSpace(k.hostnameOverride))
		if h == "" {
			return errors.New("--hostname-override: empty")
		}
		o.NodeName = h
	}
	if len(o.NodePortAddresses) > 0 && set("node-ip") {
		return errors.New("--node-ip and --nodeport-addresses exclude each other")
	}
	if len(o.NodePortAddresses) == 0 && mode == "nftables" {
		o.NodePortAddresses = []string{nodePortPrimary}
	}
	return nil
}

// applyFlags applies kube-proxy's flags when there is no --config.
func (k *kubeProxyFlags) applyFlags(set func(string) bool, o *Options, mode string) error {
	if k.proxyMode != "" {
		if err := checkMode(k.proxyMode, mode); err != nil {
			return fmt.Errorf("--proxy-mode: %w", err)
		}
	}
	if err := checkDetectLocalMode(k.detectLocalMode); err != nil {
		return fmt.Errorf("--detect-local-mode: %w", err)
	}
	if k.nodePortAddresses != "" {
		o.NodePortAddresses = strings.Split(k.nodePortAddresses, ",")
		for i := range o.NodePortAddresses {
			o.NodePortAddresses[i] = strings.TrimSpace(o.NodePortAddresses[i])
		}
		if err := checkNodePortAddresses(o.NodePortAddresses); err != nil {
			return fmt.Errorf("--nodeport-addresses: %w", err)
		}
	}
	b, err := netip.ParseAddr(k.bindAddress)
	if err != nil {
		return fmt.Errorf("--bind-address: %w", err)
	}
	o.BindAddress = b.Unmap()
	o.Profiling = k.profiling
	for _, alias := range []struct {
		kubeProxy, ours string
		value           time.Duration
		dst             *time.Duration
	}{
		{"iptables-sync-period", "sync-period", k.iptablesSyncPeriod, &o.SyncPeriod},
		{"iptables-min-sync-period", "min-sync-period", k.iptablesMinSyncPeriod, &o.MinSyncPeriod},
	} {
		if set(alias.kubeProxy) {
			if set(alias.ours) {
				return fmt.Errorf("--%s and --%s are one setting: give one", alias.kubeProxy, alias.ours)
			}
			*alias.dst = alias.value
		}
	}
	for _, name := range kubeProxyOnlyFlags {
		if strings.HasPrefix(name, "conntrack-") && set(name) {
			o.Conntrack = &conntrack.Sizing{
				MaxPerCore: k.conntrackMaxPerCore, Min: k.conntrackMin,
				TCPEstablishedTimeout: k.conntrackTCPEstablished, TCPCloseWaitTimeout: k.conntrackTCPWait,
				UDPTimeout: k.conntrackUDP, UDPStreamTimeout: k.conntrackUDPStream, TCPBeLiberal: k.conntrackTCPBeLiberal,
			}
			if err := o.Conntrack.Validate(); err != nil {
				return fmt.Errorf("--%s: %w", name, err)
			}
			break
		}
	}
	return nil
}

// checkMode checks kube-proxy's mode against the proxy's own: "" is
// kube-proxy's default, iptables (in the file: the flag left out is no
// mode asked for).
func checkMode(value, mode string) error {
	if value == mode || value == "" && mode == "iptables" {
		return nil
	}
	if value == "" {
		return fmt.Errorf("unset, which is kube-proxy's iptables mode; this is the %s proxy", mode)
	}
	return fmt.Errorf("%q is not this proxy's mode, %s", value, mode)
}

// checkDetectLocalMode accepts kube-proxy's ClusterCIDR mode (its
// default), the one served: traffic from the cluster CIDRs is local.
func checkDetectLocalMode(value string) error {
	if value == "" || value == "ClusterCIDR" {
		return nil
	}
	return fmt.Errorf("%q is not supported (only ClusterCIDR, with the cluster CIDRs)", value)
}

// readKubeProxyConfig reads kube-proxy's configuration file into o, as
// kube-proxy 1.37 would read it for mode: strictly (an unknown or
// duplicated field is an error), with kube-proxy's defaults, and refusing
// any field set to something the proxy does not serve. clusterCIDRs
// receives the file's clusterCIDR. The file's logging section, which
// kube-proxy's logging flags override, is the caller's to apply.
func (o *Options) readKubeProxyConfig(path, mode string, clusterCIDRs *string) (*kpconfig.KubeProxyConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	cfg, err := decodeKubeProxyConfig(data)
	if err != nil {
		// One line: the YAML decoder's errors span several.
		return nil, fmt.Errorf("--config %s: %s", path, strings.Join(strings.Fields(err.Error()), " "))
	}
	if err := o.useKubeProxyConfig(cfg, mode, clusterCIDRs); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	return cfg, nil
}

// decodeKubeProxyConfig decodes a KubeProxyConfiguration strictly: the
// apiVersion and kind must be kube-proxy's, and a field that it does not
// have, or that is given twice or in another case, is an error naming it.
func decodeKubeProxyConfig(data []byte) (*kpconfig.KubeProxyConfiguration, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	cfg := &kpconfig.KubeProxyConfiguration{}
	strict, err := sigsjson.UnmarshalStrict(js, cfg)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, strict[0]
	}
	if want := kpconfig.SchemeGroupVersion.String(); cfg.APIVersion != want || cfg.Kind != "KubeProxyConfiguration" {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want %s KubeProxyConfiguration", cfg.APIVersion, cfg.Kind, want)
	}
	return cfg, nil
}

// useKubeProxyConfig sets o from cfg, with kube-proxy's defaults for what
// cfg leaves unset, and reports the first field that is set to something
// not served.
func (o *Options) useKubeProxyConfig(cfg *kpconfig.KubeProxyConfiguration, mode string, clusterCIDRs *string) error {
	if err := checkMode(string(cfg.Mode), mode); err != nil {
		return fmt.Errorf("mode: %w", err)
	}
	if err := checkDetectLocalMode(string(cfg.DetectLocalMode)); err != nil {
		return fmt.Errorf("detectLocalMode: %w", err)
	}
	if err := checkNodePortAddresses(cfg.NodePortAddresses); err != nil {
		return fmt.Errorf("nodePortAddresses: %w", err)
	}
	o.NodePortAddresses = cfg.NodePortAddresses
	if cfg.HostnameOverride != "" {
		o.NodeName = strings.ToLower(strings.TrimSpace(cfg.HostnameOverride))
	}
	o.Kubeconfig = cfg.ClientConnection.Kubeconfig
	*clusterCIDRs = cfg.ClusterCIDR

	bind := cfg.BindAddress
	if bind == "" {
		bind = "0.0.0.0"
	}
	b, err := netip.ParseAddr(bind)
	if err != nil {
		return fmt.Errorf("bindAddress: %w", err)
	}
	o.BindAddress = b.Unmap()
	healthz, metrics := "0.0.0.0", "127.0.0.1"
	if !o.BindAddress.Is4() {
		healthz, metrics = "[::]", "[::1]"
	}
	if o.HealthzAddress, err = bindAddressOf(cfg.HealthzBindAddress, healthz, 10256); err != nil {
		return fmt.Errorf("healthzBindAddress: %w", err)
	}
	if o.MetricsAddress, err = bindAddressOf(cfg.MetricsBindAddress, metrics, 10249); err != nil {
		return fmt.Errorf("metricsBindAddress: %w", err)
	}
	o.Profiling = cfg.EnableProfiling

	modeCfg := struct {
		masqueradeAll         bool
		masqueradeBit         *int32
		syncPeriod, minPeriod time.Duration
		field                 string
	}{cfg.IPTables.MasqueradeAll, cfg.IPTables.MasqueradeBit, cfg.IPTables.SyncPeriod.Duration, cfg.IPTables.MinSyncPeriod.Duration, "iptables"}
	if mode == "nftables" {
		modeCfg.masqueradeAll, modeCfg.masqueradeBit = cfg.NFTables.MasqueradeAll, cfg.NFTables.MasqueradeBit
		modeCfg.syncPeriod, modeCfg.minPeriod, modeCfg.field = cfg.NFTables.SyncPeriod.Duration, cfg.NFTables.MinSyncPeriod.Duration, "nftables"
	}
	o.MasqueradeAll = modeCfg.masqueradeAll
	o.MasqueradeMark = 0
	if bit := modeCfg.masqueradeBit; bit != nil {
		if *bit < 0 || *bit > 31 {
			return fmt.Errorf("%s.masqueradeBit: %d is not within [0, 31]", modeCfg.field, *bit)
		}
		o.MasqueradeMark = 1 << *bit
	}
	o.SyncPeriod, o.MinSyncPeriod = 30*time.Second, time.Second
	if modeCfg.syncPeriod > 0 {
		o.SyncPeriod = modeCfg.syncPeriod
	}
	if modeCfg.minPeriod > 0 {
		o.MinSyncPeriod = modeCfg.minPeriod
	}
	o.LocalhostNodePorts = mode == "iptables" && (cfg.IPTables.LocalhostNodePorts == nil || *cfg.IPTables.LocalhostNodePorts)

	ct := cfg.Conntrack
	o.Conntrack = &conntrack.Sizing{
		MaxPerCore: int(deref(ct.MaxPerCore, conntrack.DefaultMaxPerCore)), Min: int(deref(ct.Min, conntrack.DefaultMin)),
		TCPEstablishedTimeout: conntrack.DefaultTCPEstablishedTimeout, TCPCloseWaitTimeout: conntrack.DefaultTCPCloseWaitTimeout,
		UDPTimeout: ct.UDPTimeout.Duration, UDPStreamTimeout: ct.UDPStreamTimeout.Duration, TCPBeLiberal: ct.TCPBeLiberal,
	}
	if ct.TCPEstablishedTimeout != nil {
		o.Conntrack.TCPEstablishedTimeout = ct.TCPEstablishedTimeout.Duration
	}
	if ct.TCPCloseWaitTimeout != nil {
		o.Conntrack.TCPCloseWaitTimeout = ct.TCPCloseWaitTimeout.Duration
	}
	if err := o.Conntrack.Validate(); err != nil {
		return fmt.Errorf("conntrack: %w", err)
	}
	return unsupportedField(cfg)
}

// bindAddressOf is kube-proxy's healthz or metrics bind address: host with
// port when value is empty, value with port when it has none.
func bindAddressOf(value, host string, port int) (string, error) {
	if value == "" {
		return net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(port)), nil
	}
	if _, _, err := net.SplitHostPort(value); err == nil {
		return value, nil
	}
	a, err := netip.ParseAddr(strings.Trim(value, "[]"))
	if err != nil {
		return "", fmt.Errorf("%q is neither an address nor an address and port", value)
	}
	return netip.AddrPortFrom(a, uint16(port)).String(), nil
}

func deref(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// served are the fields of KubeProxyConfiguration that useKubeProxyConfig
// applies, and logging, which loggingFlags.apply checks and applies.
var served = map[string]bool{
	"apiVersion": true, "kind": true, "mode": true, "detectLocalMode": true, "nodePortAddresses": true,
	"hostnameOverride": true, "clientConnection.kubeconfig": true, "clusterCIDR": true, "bindAddress": true,
	"healthzBindAddress": true, "metricsBindAddress": true, "enableProfiling": true, "logging": true,
	"iptables.masqueradeAll": true, "iptables.masqueradeBit": true, "iptables.syncPeriod": true,
	"iptables.minSyncPeriod": true, "iptables.localhostNodePorts": true,
	"nftables.masqueradeAll": true, "nftables.masqueradeBit": true, "nftables.syncPeriod": true,
	"nftables.minSyncPeriod": true,
	"conntrack.maxPerCore":   true, "conntrack.min": true, "conntrack.tcpEstablishedTimeout": true,
	"conntrack.tcpCloseWaitTimeout": true, "conntrack.tcpBeLiberal": true, "conntrack.udpTimeout": true,
	"conntrack.udpStreamTimeout": true,
}

// unsupportedField reports the first field of cfg that is set (not its
// zero value, which kube-proxy's defaults replace) and not served, by its
// path in the file.
func unsupportedField(cfg *kpconfig.KubeProxyConfiguration) error {
	if path := firstSet(reflect.ValueOf(cfg).Elem(), ""); path != "" {
		return fmt.Errorf("%s: not supported by this proxy (only its zero value is accepted)", path)
	}
	return nil
}

// firstSet returns the path of the first field of the struct v, under
// prefix, that is not served and not zero (an empty list or map is zero);
// "" when there is none. Embedded structs (TypeMeta) are checked apart.
func firstSet(v reflect.Value, prefix string) string {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		path := prefix + name
		if f.Anonymous || served[path] {
			continue
		}
		fv := v.Field(i)
		switch {
		case fv.Kind() == reflect.Struct && !isLeafStruct(fv):
			if p := firstSet(fv, path+"."); p != "" {
				return p
			}
		case fv.Kind() == reflect.Map || fv.Kind() == reflect.Slice:
			if fv.Len() > 0 {
				return path
			}
		case !fv.IsZero():
			return path
		}
	}
	return ""
}

// explicitlySet reports whether the command line sets the flag name.
func explicitlySet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// applyConntrackSizing sets the conntrack sysctls of s, as kube-proxy does
// at start, for this machine's CPUs; what it cannot write (the table size
// is read-only outside the initial network namespace) is logged.
func applyConntrackSizing(log *slog.Logger, s *conntrack.Sizing) {
	if s == nil {
		return
	}
	settings, err := s.Settings(runtime.NumCPU())
	if err != nil {
		log.Error("conntrack settings", "err", err)
		return
	}
	for _, st := range settings {
		path := filepath.Join("/proc/sys", st.Name)
		if st.AtLeast {
			if cur, err := os.ReadFile(path); err == nil {
				if n, err := strconv.Atoi(strings.TrimSpace(string(cur))); err == nil && n >= st.Value {
					continue
				}
			}
		}
		if err := os.WriteFile(path, []byte(strconv.Itoa(st.Value)), 0o644); err != nil {
			log.Warn("conntrack setting not applied", "setting", st.String(), "err", err)
		}
	}
}

// isLeafStruct reports a struct that is one value in the file (a
// duration).
func isLeafStruct(v reflect.Value) bool {
	_, ok := v.Interface().(interface{ MarshalJSON() ([]byte, error) })
	return ok
}
