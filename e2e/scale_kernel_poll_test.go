//go:build scale && linux

package e2e

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"time"

	ciliumebpf "github.com/cilium/ebpf"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/svcproxy/svcproxy/ebpf"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/nftables"
	"github.com/svcproxy/svcproxy/nftables/flat"
)

// The kernel poller tells when a change reached the kernel: when the rules
// of a Service first hold an endpoint address. It reads the kernel from the
// test process, cheaply:
//
//   - netfilter (iptables-nft and nftables): every pollInterval one
//     NFT_MSG_GETGEN, the namespace's nf_tables generation, which every
//     committed transaction (an iptables-restore, an nft transaction)
//     increments; only when it changed are the changes still pending read
//     back, each with one small targeted read (below), and again at 5, 10,
//     20, … ms after it, for settleWindow (the kernel bumps the generation
//     before the commit's rules become visible). A change found is dated at
//     the read that found it, or, when another commit came during the
//     reads, at their end;
//   - eBPF: every pollInterval, each pending change's Service looked up in
//     the pinned maps (a few map lookups, microseconds).
//
// The targeted reads: iptables, one netlink dump of the Service's KUBE-SVC
// chain (kernel-filtered by table and chain), searched for the jump to the
// endpoint's KUBE-SEP chain (written in the same iptables-restore as that
// chain; kube-proxy writes no endpoint comments beyond 1,000 endpoints);
// nftables in kube-proxy's layout, one
// dump of the Service's service chain, whose numgen map is anonymous, and
// one of that map's elements, searched for address . port; the flat
// layout, one NFT_MSG_GETSETELEM of a key of its targets map (cluster IP .
// tcp . port . index) per index, until the endpoint shows.
const pollInterval = 5 * time.Millisecond

// kernelCheck reads one Service's endpoints in one proxy's kernel state.
type kernelCheck interface {
	// generation is the nf_tables generation, or ok false when the state
	// has none (eBPF): then every pending change is read every poll.
	generation() (gen uint32, ok bool, err error)
	// holds reports whether generated Service i's rules hold endpoint ep.
	// A missing table or chain is not an error: false.
	holds(i int, ep netip.AddrPort) (bool, error)
	close()
}

// pending is a change the poller waits to see in the kernel.
type pending struct {
	service int
	ep      netip.AddrPort
	since   time.Time // the API write
	seen    time.Time // zero until seen
	tag     string
}

// poller dates pending changes as the kernel shows them.
type poller struct {
	check kernelCheck
	mu    sync.Mutex
	wait  []*pending
	done  []*pending
	// rounds and readTime are the content reads made, and their total
	// duration: the poll's cost beyond the generation reads.
	rounds, reads int
	readTime      time.Duration
	// late is the changes found on a re-read after a new generation.
	late    int
	lastErr error
	stop    chan struct{}
	stopped chan struct{}
}

func startPoller(check kernelCheck) *poller {
	p := &poller{check: check, stop: make(chan struct{}), stopped: make(chan struct{})}
	go p.run()
	return p
}

// add makes the poller wait for ep in Service i's rules, counted from since.
func (p *poller) add(i int, ep netip.AddrPort, since time.Time, tag string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wait = append(p.wait, &pending{service: i, ep: ep, since: since, tag: tag})
}

// waitTagged waits, at most timeout, until no change tagged tag is pending,
// and returns the tag's changes seen so far and the number still pending.
func (p *poller) waitTagged(tag string, timeout time.Duration) (seen []pending, left int) {
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		left = 0
		for _, w := range p.wait {
			if w.tag == tag {
				left++
			}
		}
		if left == 0 || time.Now().After(deadline) {
			seen = nil
			for _, d := range p.done {
				if d.tag == tag {
					seen = append(seen, *d)
				}
			}
			p.mu.Unlock()
			return seen, left
		}
		p.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// pendingTagged is the changes tagged tag still pending.
func (p *poller) pendingTagged(tag string) []pending {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pending
	for _, w := range p.wait {
		if w.tag == tag {
			out = append(out, *w)
		}
	}
	return out
}

// cost is the poller's content reads so far: rounds, reads, their mean
// duration, and the last error met.
func (p *poller) cost() (rounds, reads int, mean time.Duration, lastErr error) {
	rounds, reads, mean, _, lastErr = p.stats()
	return rounds, reads, mean, lastErr
}

// stats is cost and the changes found on a re-read after a new generation.
func (p *poller) stats() (rounds, reads int, mean time.Duration, late int, lastErr error) {
	p.mu.Lock()
	late = p.late
	p.mu.Unlock()
	rounds, reads, mean, lastErr = p.costLocked()
	return rounds, reads, mean, late, lastErr
}

func (p *poller) costLocked() (rounds, reads int, mean time.Duration, lastErr error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reads > 0 {
		mean = p.readTime / time.Duration(p.reads)
	}
	return p.rounds, p.reads, mean, p.lastErr
}

func (p *poller) close() {
	close(p.stop)
	<-p.stopped
	p.check.close()
}

func (p *poller) run() {
	defer close(p.stopped)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last uint32
	first := true
	var changed, next time.Time // the last new generation; the next re-read
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		gen, ok, err := p.check.generation()
		if err != nil {
			p.noteErr(err)
			continue
		}
		now := time.Now()
		switch {
		case !ok:
			p.readPending(now, false)
		case first || gen != last:
			p.readPending(now, false)
			after, _, err := p.check.generation()
			if err == nil && after != gen {
				// A commit during the reads: what they found is dated at
				// their end, and the next poll reads again.
				p.redate(now, time.Now())
				continue
			}
			last, first = gen, false
			changed, next = now, now.Add(pollInterval)
		case !changed.IsZero() && !now.Before(next) && now.Sub(changed) <= settleWindow:
			// The kernel bumps the generation before a commit's rules
			// become visible: re-read, at doubling intervals.
			p.readPending(now, true)
			next = now.Add(now.Sub(changed))
		}
	}
}

// settleWindow is how long after a new generation the poller re-reads the
// changes still pending (at 5, 10, 20, … ms): a commit's rules become
// visible some time after the generation it bumped shows.
const settleWindow = 2 * time.Second

// readPending reads every pending change once and dates those found at;
// late counts them as found on a re-read.
func (p *poller) readPending(at time.Time, late bool) {
	p.mu.Lock()
	wait := append([]*pending(nil), p.wait...)
	p.mu.Unlock()
	if len(wait) == 0 {
		return
	}
	start := time.Now()
	var found []*pending
	var lastErr error
	for _, w := range wait {
		ok, err := p.check.holds(w.service, w.ep)
		if err != nil {
			lastErr = err
			continue
		}
		if ok {
			w.seen = at
			found = append(found, w)
		}
	}
	took := time.Since(start)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rounds++
	p.reads += len(wait)
	if late {
		p.late += len(found)
	}
	p.readTime += took
	if lastErr != nil {
		p.lastErr = lastErr
	}
	if len(found) == 0 {
		return
	}
	keep := p.wait[:0]
	for _, w := range p.wait {
		if w.seen.IsZero() {
			keep = append(keep, w)
		} else {
			p.done = append(p.done, w)
		}
	}
	p.wait = keep
}

// redate moves the changes seen at from to to.
func (p *poller) redate(from, to time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.done {
		if d.seen.Equal(from) {
			d.seen = to
		}
	}
}

func (p *poller) noteErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastErr = err
}

// Netlink constants of nf_tables (linux/netfilter/nf_tables.h).
const (
	nfnlSubsysNFTables = 10
	nftMsgGetRule      = 7
	nftMsgGetSetElem   = 13
	nftMsgGetGen       = 16
	nftaRuleTable      = 1
	nftaRuleChain      = 2
	nftaSetElemTable   = 1
	nftaSetElemSet     = 2
	// NFTA_SET_ELEM_LIST_ELEMENTS, NFTA_LIST_ELEM, NFTA_SET_ELEM_KEY,
	// NFTA_DATA_VALUE.
	nftaSetElemListElements = 3
	nftaListElem            = 1
	nftaSetElemKey          = 1
	nftaDataValue           = 1
	nftaGenID               = 1
)

// nftConn is a netfilter netlink socket in a namespace.
type nftConn struct{ c *netlink.Conn }

func dialNFT(ns *netns.NS) (*nftConn, error) {
	var c *netlink.Conn
	err := ns.Do(func() error {
		var err error
		c, err = netlink.Dial(unix.NETLINK_NETFILTER, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netfilter netlink socket in %s: %w", ns.Label, err)
	}
	return &nftConn{c: c}, nil
}

// request sends message type msg of family with attrs and returns the
// replies' payloads after their nfgenmsg header.
func (n *nftConn) request(msg uint16, family uint8, dump bool, attrs func(*netlink.AttributeEncoder)) ([][]byte, error) {
	data := []byte{family, 0, 0, 0}
	if attrs != nil {
		ae := netlink.NewAttributeEncoder()
		attrs(ae)
		b, err := ae.Encode()
		if err != nil {
			return nil, err
		}
		data = append(data, b...)
	}
	flags := netlink.Request
	if dump {
		flags |= netlink.Dump
	}
	msgs, err := n.c.Execute(netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysNFTables<<8 | msg), Flags: flags}, Data: data})
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, len(msgs))
	for _, m := range msgs {
		if len(m.Data) >= 4 {
			out = append(out, m.Data[4:])
		}
	}
	return out, nil
}

func (n *nftConn) generation() (uint32, bool, error) {
	msgs, err := n.request(nftMsgGetGen, unix.AF_UNSPEC, false, nil)
	if err != nil {
		return 0, false, fmt.Errorf("reading the nf_tables generation: %w", err)
	}
	for _, m := range msgs {
		ad, err := netlink.NewAttributeDecoder(m)
		if err != nil {
			return 0, false, err
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == nftaGenID {
				return ad.Uint32(), true, nil
			}
		}
	}
	return 0, false, errors.New("no generation in the reply")
}

// chainRules is the raw netlink text of the rules of one chain; nil when
// the table or chain does not exist.
func (n *nftConn) chainRules(table, chain string) ([]byte, error) {
	msgs, err := n.request(nftMsgGetRule, unix.AF_INET, true, func(ae *netlink.AttributeEncoder) {
		ae.String(nftaRuleTable, table)
		ae.String(nftaRuleChain, chain)
	})
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	return bytes.Join(msgs, nil), err
}

// setElements is the raw netlink text of the elements of one set.
func (n *nftConn) setElements(table, set string) ([]byte, error) {
	msgs, err := n.request(nftMsgGetSetElem, unix.AF_INET, true, func(ae *netlink.AttributeEncoder) {
		ae.String(nftaSetElemTable, table)
		ae.String(nftaSetElemSet, set)
	})
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	return bytes.Join(msgs, nil), err
}

func (n *nftConn) close() { n.c.Close() }

// iptablesCheck reads KUBE-SVC chains (kube-proxy's names, which ours
// share) of table nat.
type iptablesCheck struct {
	*nftConn
	spec scalegen.Spec
}

func (c iptablesCheck) holds(i int, ep netip.AddrPort) (bool, error) {
	names, name := iptables.DefaultNames(), c.spec.PortName(i)
	rules, err := c.chainRules("nat", names.ServiceChain(name))
	if err != nil {
		return false, err
	}
	return bytes.Contains(rules, []byte(names.EndpointChain(name, ep)+"\x00")), nil
}

// nftablesCheck reads the service chains of kube-proxy's nftables layout
// and their anonymous numgen maps.
type nftablesCheck struct {
	*nftConn
	spec scalegen.Spec
}

func (c nftablesCheck) holds(i int, ep netip.AddrPort) (bool, error) {
	rules, err := c.chainRules("kube-proxy", "service-"+nftables.ServiceChainBase(c.spec.PortName(i)))
	if err != nil || rules == nil {
		return false, err
	}
	want := append(ep.Addr().AsSlice(), byte(ep.Port()>>8), byte(ep.Port()))
	for _, name := range anonymousSets(rules) {
		elems, err := c.setElements("kube-proxy", name)
		if err != nil {
			return false, err
		}
		if bytes.Contains(elems, want) {
			return true, nil
		}
	}
	return false, nil
}

// anonymousSets are the names of the anonymous sets and maps that the
// netlink text of rules names: NUL-terminated strings of printable
// characters that start with "__" (nft names them "__map<n>", our
// executor with a prefix of its own). A name that is none reads as an
// empty set.
func anonymousSets(rules []byte) []string {
	var names []string
	for rest := rules; ; {
		k := bytes.Index(rest, []byte("__"))
		if k < 0 {
			return names
		}
		end := bytes.IndexByte(rest[k:], 0)
		if end < 0 {
			return names
		}
		name := rest[k : k+end]
		if len(name) <= 64 && bytes.IndexFunc(name, func(r rune) bool { return r < '!' || r > '~' }) < 0 && !slices.Contains(names, string(name)) {
			names = append(names, string(name))
		}
		rest = rest[k+end:]
	}
}

// flatCheck reads a Service's keys of its targets map in the flat layout
// (cluster IPs of TCP ports with ten endpoints): one NFT_MSG_GETSETELEM of
// one key (cluster IP . tcp . port . index) for each index until the
// endpoint is found.
type flatCheck struct {
	*nftConn
	spec scalegen.Spec
}

func (c flatCheck) holds(i int, ep netip.AddrPort) (bool, error) {
	front, _ := c.spec.Frontend(i)
	want := append(ep.Addr().AsSlice(), byte(ep.Port()>>8), byte(ep.Port()))
	set := fmt.Sprintf("cluster-%d-tcp-targets", scalegen.DefaultEndpoints)
	for k := range scalegen.DefaultEndpoints {
		// The key's fields, each padded to 4 bytes: the address, the
		// protocol, the port (network order), the index (host order).
		key := append(front.Addr().AsSlice(), unix.IPPROTO_TCP, 0, 0, 0, byte(front.Port()>>8), byte(front.Port()), 0, 0)
		key = binary.NativeEndian.AppendUint32(key, uint32(k))
		msgs, err := c.request(nftMsgGetSetElem, unix.AF_INET, false, func(ae *netlink.AttributeEncoder) {
			ae.String(nftaSetElemTable, flat.DefaultTable)
			ae.String(nftaSetElemSet, set)
			ae.Nested(nftaSetElemListElements, func(nae *netlink.AttributeEncoder) error {
				nae.Nested(nftaListElem, func(le *netlink.AttributeEncoder) error {
					le.Nested(nftaSetElemKey, func(ke *netlink.AttributeEncoder) error {
						ke.Bytes(nftaDataValue, key)
						return nil
					})
					return nil
				})
				return nil
			})
		})
		if errors.Is(err, unix.ENOENT) {
			return false, nil // no table, map or key (yet)
		}
		if err != nil {
			return false, err
		}
		if bytes.Contains(bytes.Join(msgs, nil), want) {
			return true, nil
		}
	}
	return false, nil
}

// ebpfCheck looks Services up in the eBPF proxy's pinned maps.
type ebpfCheck struct {
	pinPath            string
	services, backends *ciliumebpf.Map
	spec               scalegen.Spec
}

func (c *ebpfCheck) generation() (uint32, bool, error) { return 0, false, nil }

func (c *ebpfCheck) holds(i int, ep netip.AddrPort) (bool, error) {
	if c.services == nil {
		opts := &ciliumebpf.LoadPinOptions{ReadOnly: true}
		s, err := ciliumebpf.LoadPinnedMap(filepath.Join(c.pinPath, "svcp_services"), opts)
		if err != nil {
			return false, nil // not pinned yet
		}
		b, err := ciliumebpf.LoadPinnedMap(filepath.Join(c.pinPath, "svcp_backends"), opts)
		if err != nil {
			s.Close()
			return false, nil
		}
		c.services, c.backends = s, b
	}
	front, _ := c.spec.Frontend(i)
	var sv ebpf.ServiceValue
	key := ebpf.ServiceKey{Addr: ebpf.AddrOf(front.Addr()), Port: front.Port(), Proto: ebpf.ProtoTCP}
	if err := c.services.Lookup(&key, &sv); err != nil {
		if errors.Is(err, ciliumebpf.ErrKeyNotExist) {
			return false, nil
		}
		return false, err
	}
	// The backends map holds a group's slots in chunks of 8: element
	// {ID, Slot/8} (struct be_key and be_chunk of ebpf/bpf/sock.c).
	const chunkSlots = 8
	for chunk := range (sv.Count + chunkSlots - 1) / chunkSlots {
		var bv [chunkSlots]ebpf.BackendValue
		if err := c.backends.Lookup(&ebpf.BackendKey{ID: sv.ID, Slot: chunk}, &bv); err != nil {
			if errors.Is(err, ciliumebpf.ErrKeyNotExist) {
				continue
			}
			return false, err
		}
		for _, b := range bv {
			if b.AddrPort() == ep {
				return true, nil
			}
		}
	}
	return false, nil
}

func (c *ebpfCheck) close() {
	if c.services != nil {
		c.services.Close()
		c.backends.Close()
	}
}
