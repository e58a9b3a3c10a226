package proxy

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"strings"
)

// kubeProxyFlags are the flags of kube-proxy that the reference proxies
// take under kube-proxy's names, besides those they share with it.
type kubeProxyFlags struct {
	nodePortAddresses string
	bindAddress       string
}

// addKubeProxyFlags registers kube-proxy's flags on fs.
func addKubeProxyFlags(fs *flag.FlagSet) *kubeProxyFlags {
	k := &kubeProxyFlags{}
	fs.StringVar(&k.nodePortAddresses, "nodeport-addresses", "", "kube-proxy's: CIDRs and the keywords primary (the node's primary addresses), localhost and all, comma-separated: NodePorts are served on the node's addresses inside them (default: all for iptables-proxy, primary for nftables-proxy; excludes --node-ip)")
	fs.StringVar(&k.bindAddress, "bind-address", "0.0.0.0", "kube-proxy's: when not 0.0.0.0 or ::, the node's primary address of its family (for --nodeport-addresses primary)")
	return k
}

// apply completes o from the kube-proxy flags, for the proxy called name,
// once fs is parsed.
func (k *kubeProxyFlags) apply(fs *flag.FlagSet, o *Options, name string) error {
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
	if len(o.NodePortAddresses) > 0 && explicitlySet(fs, "node-ip") {
		return errors.New("--node-ip and --nodeport-addresses exclude each other")
	}
	if len(o.NodePortAddresses) == 0 && name == "nftables-proxy" {
		o.NodePortAddresses = []string{nodePortPrimary}
	}
	return nil
}

// explicitlySet reports whether the command line sets the flag name.
func explicitlySet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
