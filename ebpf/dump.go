package ebpf

import (
	"fmt"
	"io"
	"maps"
	"slices"
)

// WriteTo writes the elements of m as text, one per line, each map's
// sorted by key: what `--dry-run` of the eBPF reference proxy prints. A
// nil m writes nothing.
//
//	service 198.19.0.10:80/6 -> group 0 count 2 affinity 0s
//	service node port 30080/6 (IPv4) -> reject
//	backend 0/0 198.18.64.2:8080
//	node-addr 198.18.0.1
//	cluster-addr 198.19.0.10
//	service-cidr 198.19.0.0/16
func (m *Maps) WriteTo(w io.Writer) (int64, error) {
	if m == nil {
		m = NewMaps()
	}
	var n int64
	var err error
	line := func(format string, args ...any) {
		if err == nil {
			var k int
			k, err = fmt.Fprintf(w, format+"\n", args...)
			n += int64(k)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(m.Services), compareServiceKey) {
		v := m.Services[k]
		switch {
		case v.Flags&FlagReject != 0:
			line("service %v -> reject", k)
		case v.Flags&FlagDrop != 0:
			line("service %v -> drop", k)
		case v.Flags&FlagFirewall != 0:
			line("service %v -> firewall", k)
		default:
			line("service %v -> group %d count %d affinity %ds", k, v.ID, v.Count, v.Affinity)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(m.Backends), compareBackendKey) {
		line("backend %d/%d %v", k.ID, k.Slot, m.Backends[k].AddrPort())
	}
	for _, a := range slices.SortedFunc(maps.Keys(m.NodeAddrs), compareAddr) {
		line("node-addr %v", a.Netip())
	}
	for _, a := range slices.SortedFunc(maps.Keys(m.ClusterAddrs), compareAddr) {
		line("cluster-addr %v", a.Netip())
	}
	for _, k := range slices.SortedFunc(maps.Keys(m.ServiceCIDRs), compareCIDRKey) {
		bits := int(k.Prefixlen)
		if k.Addr.Netip().Is4() {
			bits -= 96
		}
		line("service-cidr %v/%d", k.Addr.Netip(), bits)
	}
	return n, err
}
