package ebpf

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/maglev"
)

// NorthSouthConfig says where the tc programs (bpf/tc.c) attach: to the
// ingress (TCX) of interfaces in one network namespace.
type NorthSouthConfig struct {
	// Namespace is the network namespace of the interfaces (a file such as
	// /var/run/netns/NAME); "" is the executor's own.
	Namespace string
	// External are the interfaces on which traffic from outside the node
	// arrives and its replies leave: svcp_tc_in on their ingress,
	// svcp_tc_reply on their egress.
	External []string
	// Pods are the interfaces that lead to the backends (pods, and remote
	// nodes): svcp_tc_masq on their egress, svcp_tc_unmasq on their
	// ingress.
	Pods []string
	// MaglevSize is the size of every Maglev table, a prime up to
	// MaglevMax (maglev.DefaultSize, which is MaglevMax, for 0).
	MaglevSize int
}

// loadNorthSouth loads the tc programs, sharing svcp_node_addrs and
// svcp_backends with the socket programs, and attaches them.
func (d *Dataplane) loadNorthSouth(objs *sockObjects) (*tcObjects, []link.Link, error) {
	cfg := d.cfg.NorthSouth
	spec, err := loadTc()
	if err != nil {
		return nil, nil, fmt.Errorf("ebpf: reading the tc programs: %w", err)
	}
	size := cfg.MaglevSize
	if size == 0 {
		size = maglev.DefaultSize
	}
	if size > MaglevMax || !maglev.IsPrime(size) {
		return nil, nil, fmt.Errorf("ebpf: Maglev table size %d is not a prime up to %d", size, MaglevMax)
	}
	if err := spec.Variables["maglev_size"].Set(uint32(size)); err != nil {
		return nil, nil, fmt.Errorf("ebpf: Maglev size: %w", err)
	}
	tc := new(tcObjects)
	shared := map[string]*cebpf.Map{"svcp_node_addrs": objs.SvcpNodeAddrs, "svcp_backends": objs.SvcpBackends}
	if err := spec.LoadAndAssign(tc, &cebpf.CollectionOptions{MapReplacements: shared}); err != nil {
		return nil, nil, fmt.Errorf("ebpf: loading the tc programs: %w", err)
	}
	var links []link.Link
	attach := func() error {
		for _, set := range []struct {
			names  []string
			prog   *cebpf.Program
			attach cebpf.AttachType
		}{
			{cfg.External, tc.SvcpTcIn, cebpf.AttachTCXIngress},
			{cfg.External, tc.SvcpTcReply, cebpf.AttachTCXEgress},
			{cfg.Pods, tc.SvcpTcMasq, cebpf.AttachTCXEgress},
			{cfg.Pods, tc.SvcpTcUnmasq, cebpf.AttachTCXIngress},
		} {
			for _, name := range set.names {
				iface, err := net.InterfaceByName(name)
				if err != nil {
					return err
				}
				l, err := link.AttachTCX(link.TCXOptions{Interface: iface.Index, Program: set.prog, Attach: set.attach})
				if err != nil {
					return fmt.Errorf("attaching to %s (%v): %w", name, set.attach, err)
				}
				links = append(links, l)
			}
		}
		return nil
	}
	if cfg.Namespace == "" {
		err = attach()
	} else {
		err = inNetns(cfg.Namespace, attach)
	}
	if err != nil {
		for _, l := range links {
			l.Close()
		}
		tc.Close()
		return nil, nil, fmt.Errorf("ebpf: tc programs: %w", err)
	}
	return tc, links, nil
}

// readNorthSouth reads the elements of family back from the tc maps.
func readNorthSouth(tc *tcObjects, family v1.IPFamily, size int) (*NorthSouth, error) {
	ns := newNorthSouth(size)
	v6 := family == v1.IPv6Protocol
	var sk ServiceKey
	var ev ExtValue
	it := tc.SvcpExt.Iterate()
	for it.Next(&sk, &ev) {
		if ofFamily(sk.Addr, family) {
			ns.Ext[sk] = ev
		}
	}
	errs := []error{it.Err()}
	var id uint32
	var tab MaglevTable
	it = tc.SvcpMaglev.Iterate()
	for it.Next(&id, &tab) {
		if (id&v6Group != 0) == v6 {
			t := tab
			ns.Maglev[id] = &t
		}
	}
	errs = append(errs, it.Err())
	var rk RangeKey
	var one uint8
	it = tc.SvcpRanges.Iterate()
	for it.Next(&rk, &one) {
		if (rk.ID&v6Group != 0) == v6 {
			ns.Ranges[rk] = one
		}
	}
	errs = append(errs, it.Err())
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ebpf: reading the tc maps: %w", err)
	}
	return ns, nil
}

// applyNorthSouth changes the tc maps from have to want: Maglev tables
// and ranges written, frontends written and deleted, then the tables and
// ranges no frontend needs deleted. It returns the number of
// element changes.
func applyNorthSouth(tc *tcObjects, have, want *NorthSouth) (int, error) {
	var mk []uint32
	var mv []MaglevTable
	for _, id := range slices.Sorted(maps.Keys(want.Maglev)) {
		if t, ok := have.Maglev[id]; !ok || t != want.Maglev[id] && *t != *want.Maglev[id] {
			mk, mv = append(mk, id), append(mv, *want.Maglev[id])
		}
	}
	var delM []uint32
	for _, id := range slices.Sorted(maps.Keys(have.Maglev)) {
		if _, ok := want.Maglev[id]; !ok {
			delM = append(delM, id)
		}
	}
	putR, delR := diffMap(have.Ranges, want.Ranges, func(a, b RangeKey) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), bytes.Compare(a.Addr[:], b.Addr[:]), cmp.Compare(a.Prefixlen, b.Prefixlen))
	})
	putE, delE := diffMap(have.Ext, want.Ext, compareServiceKey)
	rk, rv := split(putR)
	ek, ev := split(putE)
	steps := []func() error{
		func() error {
			// One at a time: a table is 32 KiB, and a batch marshals
			// all its values at once.
			for i := range mk {
				if err := tc.SvcpMaglev.Put(mk[i], &mv[i]); err != nil {
					return fmt.Errorf("ebpf: writing Maglev table %d: %w", mk[i], err)
				}
			}
			return nil
		},
		func() error { return putAll(tc.SvcpRanges, rk, rv) },
		func() error { return putAll(tc.SvcpExt, ek, ev) },
		func() error { return deleteAll(tc.SvcpExt, delE) },
		func() error { return deleteAll(tc.SvcpMaglev, delM) },
		func() error { return deleteEach(tc.SvcpRanges, delR) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return 0, err
		}
	}
	return len(mk) + len(delM) + len(putR) + len(delR) + len(putE) + len(delE), nil
}
