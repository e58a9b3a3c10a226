package ebpf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	cebpf "github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/ruleset"
)

// Config says where the programs go.
type Config struct {
	// Cgroup is the cgroup v2 directory the programs attach to: they
	// translate the sockets of the processes in it and below it. A node
	// serves every process with the root of its cgroup v2 tree, as Cilium
	// does; a test passes a child cgroup of its own.
	Cgroup string
	// PinPath, when set, is a directory on a bpffs where the maps and the
	// links are pinned, so that the programs keep serving after the
	// process exits, and a later process (or Cleanup) finds them. Without
	// it, the programs are detached when the Dataplane is closed.
	PinPath string
	// SocketNamespaces are the network namespaces (files such as
	// /var/run/netns/NAME or /proc/PID/ns/net) whose connected UDP
	// sockets are destroyed when the endpoint they were translated to is
	// removed; empty means the executor's own namespace. A node lists its
	// pods' namespaces here: a socket iterator sees one namespace.
	SocketNamespaces []string
	// NorthSouth, when set, loads the tc programs too and attaches them
	// as it says (their links are not pinned).
	NorthSouth *NorthSouthConfig
}

// Dataplane is the loaded programs and their maps, shared by the
// Executors of both IP families. It loads and attaches the programs once,
// on the first Sync; a Service change is element updates only.
type Dataplane struct {
	cfg Config

	mu    sync.Mutex
	objs  *sockObjects
	links []link.Link
	// destroy is the UDP socket iterator (bpf/destroy.c), nil where it
	// does not load (a kernel without bpf_sock_destroy, before 6.5);
	// destroyErr then says why.
	destroy    *destroyObjects
	destroyErr error
	// tc is the north-south programs' objects, with Config.NorthSouth.
	tc *tcObjects
}

// NewDataplane returns a Dataplane that loads nothing yet: the first
// Sync loads the programs and attaches them to cfg.Cgroup, which must
// then be a cgroup v2 directory; Cleanup needs only cfg.PinPath.
func NewDataplane(cfg Config) *Dataplane {
	return &Dataplane{cfg: cfg}
}

// checkCgroup reports why dir is not a cgroup v2 directory.
func checkCgroup(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("ebpf: cgroup %q: %w", dir, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("ebpf: %q is not a cgroup v2 directory", dir)
	}
	return nil
}

// attachments are the programs and where each attaches.
func (o *sockObjects) attachments() []struct {
	name   string
	prog   *cebpf.Program
	attach cebpf.AttachType
} {
	return []struct {
		name   string
		prog   *cebpf.Program
		attach cebpf.AttachType
	}{
		{"connect4", o.SvcpConnect4, cebpf.AttachCGroupInet4Connect},
		{"connect6", o.SvcpConnect6, cebpf.AttachCGroupInet6Connect},
		{"sendmsg4", o.SvcpSendmsg4, cebpf.AttachCGroupUDP4Sendmsg},
		{"sendmsg6", o.SvcpSendmsg6, cebpf.AttachCGroupUDP6Sendmsg},
		{"recvmsg4", o.SvcpRecvmsg4, cebpf.AttachCGroupUDP4Recvmsg},
		{"recvmsg6", o.SvcpRecvmsg6, cebpf.AttachCGroupUDP6Recvmsg},
		{"getpeername4", o.SvcpGetpeer4, cebpf.AttachCgroupInet4GetPeername},
		{"getpeername6", o.SvcpGetpeer6, cebpf.AttachCgroupInet6GetPeername},
	}
}

// mapNames are the maps' names, which are their pins' file names.
var mapNames = []string{"svcp_services", "svcp_backends", "svcp_node_addrs", "svcp_clus_addrs", "svcp_svc_cidrs", "svcp_affinity", "svcp_revnat"}

// load loads and attaches the programs, once: with PinPath, the pinned
// maps are reused and the pinned links updated to the new programs. A
// pinned map that the programs cannot use (of an older layout) fails the
// load: Cleanup removes it.
func (d *Dataplane) load() (*sockObjects, error) {
	if d == nil {
		return nil, errors.New("ebpf: no Dataplane")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.objs != nil {
		return d.objs, nil
	}
	if err := checkCgroup(d.cfg.Cgroup); err != nil {
		return nil, err
	}
	spec, err := loadSock()
	if err != nil {
		return nil, fmt.Errorf("ebpf: reading the programs: %w", err)
	}
	opts := &cebpf.CollectionOptions{MapReplacements: map[string]*cebpf.Map{}}
	if d.cfg.PinPath != "" {
		if err := os.MkdirAll(d.cfg.PinPath, 0o700); err != nil {
			return nil, fmt.Errorf("ebpf: pin path: %w", err)
		}
		for _, name := range mapNames {
			m, err := cebpf.LoadPinnedMap(filepath.Join(d.cfg.PinPath, name), nil)
			if err == nil {
				opts.MapReplacements[name] = m
			}
		}
	}
	objs := new(sockObjects)
	err = spec.LoadAndAssign(objs, opts)
	for _, m := range opts.MapReplacements {
		m.Close() // LoadAndAssign holds its own reference
	}
	if err != nil {
		return nil, fmt.Errorf("ebpf: loading the programs: %w", err)
	}
	links, err := d.attach(objs)
	if err != nil {
		objs.Close()
		return nil, err
	}
	if d.cfg.NorthSouth != nil {
		tc, tcLinks, err := d.loadNorthSouth(objs)
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			objs.Close()
			return nil, err
		}
		d.tc, links = tc, append(links, tcLinks...)
	}
	d.objs, d.links = objs, links
	d.destroy, d.destroyErr = loadDestroyer(objs)
	return objs, nil
}

// loadDestroyer loads the UDP socket iterator, sharing svcp_revnat with
// the socket programs.
func loadDestroyer(objs *sockObjects) (*destroyObjects, error) {
	spec, err := loadDestroy()
	if err != nil {
		return nil, err
	}
	d := new(destroyObjects)
	if err := spec.LoadAndAssign(d, &cebpf.CollectionOptions{MapReplacements: map[string]*cebpf.Map{"svcp_revnat": objs.SvcpRevnat}}); err != nil {
		return nil, fmt.Errorf("ebpf: loading the UDP socket iterator: %w", err)
	}
	return d, nil
}

// attach attaches every program to the cgroup (or updates the pinned
// link to it) and pins the maps and links with PinPath.
func (d *Dataplane) attach(objs *sockObjects) ([]link.Link, error) {
	var links []link.Link
	fail := func(err error) ([]link.Link, error) {
		for _, l := range links {
			l.Close()
		}
		return nil, err
	}
	for _, a := range objs.attachments() {
		pin := ""
		if d.cfg.PinPath != "" {
			pin = filepath.Join(d.cfg.PinPath, "link_"+a.name)
			if l, err := link.LoadPinnedLink(pin, nil); err == nil {
				if err := l.Update(a.prog); err != nil {
					l.Close()
					return fail(fmt.Errorf("ebpf: updating the pinned link %s: %w", pin, err))
				}
				links = append(links, l)
				continue
			}
		}
		l, err := link.AttachCgroup(link.CgroupOptions{Path: d.cfg.Cgroup, Attach: a.attach, Program: a.prog})
		if err != nil {
			return fail(fmt.Errorf("ebpf: attaching %s to %s: %w", a.name, d.cfg.Cgroup, err))
		}
		links = append(links, l)
		if pin != "" {
			if err := l.Pin(pin); err != nil {
				return fail(fmt.Errorf("ebpf: pinning %s: %w", pin, err))
			}
		}
	}
	if d.cfg.PinPath != "" {
		for name, m := range objs.maps() {
			pin := filepath.Join(d.cfg.PinPath, name)
			if _, err := os.Stat(pin); err == nil {
				continue // the pinned map load reused
			}
			if err := m.Pin(pin); err != nil {
				return fail(fmt.Errorf("ebpf: pinning map %s: %w", name, err))
			}
		}
	}
	return links, nil
}

// maps are the maps by name.
func (o *sockObjects) maps() map[string]*cebpf.Map {
	return map[string]*cebpf.Map{
		"svcp_services": o.SvcpServices, "svcp_backends": o.SvcpBackends, "svcp_node_addrs": o.SvcpNodeAddrs,
		"svcp_clus_addrs": o.SvcpClusAddrs, "svcp_svc_cidrs": o.SvcpSvcCidrs, "svcp_affinity": o.SvcpAffinity, "svcp_revnat": o.SvcpRevnat,
	}
}

// Cleanup detaches the programs and removes the maps: those this
// Dataplane loaded, and those pinned under PinPath (then removed),
// whichever process made them. A nil Dataplane has nothing to remove.
func (d *Dataplane) Cleanup() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, l := range d.links {
		if d.cfg.PinPath != "" {
			errs = append(errs, l.Unpin())
		}
		errs = append(errs, l.Close())
	}
	d.links = nil
	errs = append(errs, d.closeObjects())
	if d.cfg.PinPath != "" {
		for _, a := range (&sockObjects{}).attachments() {
			pin := filepath.Join(d.cfg.PinPath, "link_"+a.name)
			if l, err := link.LoadPinnedLink(pin, nil); err == nil {
				errs = append(errs, l.Unpin(), l.Close())
			}
		}
		for _, name := range mapNames {
			if err := os.Remove(filepath.Join(d.cfg.PinPath, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		if err := os.Remove(d.cfg.PinPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ebpf: cleanup: %w", err)
	}
	return nil
}

// Close releases the Dataplane's file descriptors. Without PinPath that
// detaches the programs and frees the maps; with it, they stay. Closing a
// nil or closed Dataplane does nothing.
func (d *Dataplane) Close() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, l := range d.links {
		errs = append(errs, l.Close())
	}
	d.links = nil
	errs = append(errs, d.closeObjects())
	return errors.Join(errs...)
}

// closeObjects closes the programs and maps the Dataplane holds.
func (d *Dataplane) closeObjects() error {
	var errs []error
	if d.destroy != nil {
		errs = append(errs, d.destroy.Close())
		d.destroy = nil
	}
	if d.tc != nil {
		errs = append(errs, d.tc.Close())
		d.tc = nil
	}
	if d.objs != nil {
		errs = append(errs, d.objs.Close())
		d.objs = nil
	}
	return errors.Join(errs...)
}

// destroySockets destroys the connected UDP sockets of the
// SocketNamespaces that the programs translated to one of gone.
func (d *Dataplane) destroySockets(gone []BackendValue) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.destroy == nil {
		return d.destroyErr
	}
	m := d.destroy.SvcpGone
	one := uint8(1)
	var errs []error
	for _, g := range gone {
		errs = append(errs, m.Put(g, one))
	}
	defer func() {
		for _, g := range gone {
			m.Delete(g)
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ebpf: listing removed endpoints: %w", err)
	}
	it, err := link.AttachIter(link.IterOptions{Program: d.destroy.SvcpDestroyUdp})
	if err != nil {
		return fmt.Errorf("ebpf: UDP socket iterator: %w", err)
	}
	defer it.Close()
	run := func() error {
		rd, err := it.Open()
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, rd)
		return errors.Join(err, rd.Close())
	}
	if len(d.cfg.SocketNamespaces) == 0 {
		return run()
	}
	for _, ns := range d.cfg.SocketNamespaces {
		if err := inNetns(ns, run); err != nil {
			errs = append(errs, fmt.Errorf("ebpf: destroying UDP sockets in %s: %w", ns, err))
		}
	}
	return errors.Join(errs...)
}

// inNetns runs fn on a goroutine locked to an OS thread that is moved
// into the network namespace at path and back. If moving back fails, the
// thread stays locked and ends with the goroutine: no other code runs in
// the namespace.
func inNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		err = fn()
		if back := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); back != nil {
			errc <- errors.Join(err, fmt.Errorf("setns back: %w", back))
			return // the thread stays locked and is destroyed
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// Executor is the engine.Backend of one IP family on a Dataplane.
type Executor struct {
	dp     *Dataplane
	family v1.IPFamily
	// last is what the last successful Sync rendered and applied; nil
	// before it, and after a failure, so that the next Sync is full.
	last *Contents
	// lastNS is the north-south contents the last Sync applied.
	lastNS *NorthSouth
	full   bool
}

// SyncDetails is what one sync did: the svcproxy.SyncResult that Sync
// returns, and the element changes it applied, and the endpoints it removed from every group
// (GoneEndpoints), whose translated connected UDP sockets it destroyed in
// Config.SocketNamespaces; SocketDestroyError says why it could not
// (the sync itself succeeded).
type SyncDetails struct {
	svcproxy.SyncResult
	Puts, Deletes      int
	GoneEndpoints      int
	SocketDestroyError string
	// NorthSouthChanges counts the tc maps' element changes.
	NorthSouthChanges int
}

// Executor returns the Backend of family on d.
func (d *Dataplane) Executor(family v1.IPFamily) *Executor {
	return &Executor{dp: d, family: family, full: true}
}

// Sync makes the maps hold rs's contents. A full Sync reads the family's
// elements back from the maps and changes what differs; an incremental one
// applies the changes from the last Sync's contents (Render and Changes:
// time proportional to the change). It loads and
// attaches the programs on the first call.
func (e *Executor) Sync(ctx context.Context, rs *ruleset.Ruleset) (svcproxy.SyncResult, error) {
	d, err := e.Apply(ctx, rs)
	return d.SyncResult, err
}

// Apply is Sync, and returns this backend's account of the sync too.
func (e *Executor) Apply(ctx context.Context, rs *ruleset.Ruleset) (SyncDetails, error) {
	if !e.made() {
		return SyncDetails{}, errNotMade
	}
	if rs == nil || rs.Config().Family != e.family {
		return SyncDetails{}, fmt.Errorf("ebpf: Sync of the %s executor needs a %s Ruleset", e.family, e.family)
	}
	objs, err := e.dp.load()
	if err != nil {
		return SyncDetails{}, err
	}
	full := e.full || e.last == nil
	want := Render(rs, e.last)
	var ops Ops
	var gone []BackendValue
	var packed chunkWrites
	slots := -1 // the backend slots written, when packed
	current := func(ck chunkKey) (backendChunk, error) { return lookupChunk(objs, ck) }
	if full {
		have, err := readMaps(objs, e.family)
		if err != nil {
			e.last = nil
			return SyncDetails{}, err
		}
		if have.empty() {
			ops, packed, slots = want.allOps(true)
		} else {
			ops, gone = Diff(have, want.Maps()), goneEndpoints(e.last, have, want)
		}
		current = fromSlots(have.Backends)
	} else {
		ops = Changes(e.last, want)
		for _, at := range GoneEndpoints(e.last, want) {
			gone = append(gone, BackendValue{Addr: AddrOf(at.Addr()), Port: at.Port()})
		}
	}
	if slots < 0 {
		if packed, err = packBackends(ops.PutBackends, ops.DelBackends, current); err != nil {
			e.last = nil
			return SyncDetails{}, err
		}
	}
	details := &SyncDetails{SyncResult: svcproxy.SyncResult{Full: full}, Puts: puts(ops) + max(slots, 0), Deletes: ops.Len() - puts(ops), GoneEndpoints: len(gone)}
	// The tc maps change once the backends they point at are written and
	// before the slots they stop pointing at are cleared.
	if err := applyOps(objs, ops, packed, func() error { return e.syncNorthSouth(rs, want, full, details) }); err != nil {
		e.lastNS = nil
		e.last, e.full = nil, true
		return SyncDetails{SyncResult: svcproxy.SyncResult{Full: full}}, err
	}
	e.last, e.full = want, false
	if len(gone) > 0 {
		if err := e.dp.destroySockets(gone); err != nil {
			details.SocketDestroyError = err.Error()
		}
	}
	return *details, nil
}

// syncNorthSouth makes the tc maps hold rs's north-south contents (with
// Config.NorthSouth): from the family's elements read back on a full
// sync, from the last Sync's otherwise, and not at all when the sync
// changes no port with an external frontend.
func (e *Executor) syncNorthSouth(rs *ruleset.Ruleset, want *Contents, full bool, details *SyncDetails) error {
	cfg := e.dp.cfg.NorthSouth
	if cfg == nil {
		return nil
	}
	if !full && e.lastNS != nil && want.externalUnchanged(e.last) {
		return nil // no external frontend changed: nor did the tc maps
	}
	ns, err := renderNorthSouth(rs, want, cfg.MaglevSize, e.lastNS)
	if err != nil {
		return err
	}
	have := e.lastNS
	if full || have == nil {
		if have, err = readNorthSouth(e.dp.tc, e.family, ns.Size); err != nil {
			return err
		}
	}
	n, err := applyNorthSouth(e.dp.tc, have, ns)
	if err != nil {
		e.lastNS = nil
		return err
	}
	e.lastNS, details.NorthSouthChanges = ns, n
	return nil
}

// goneEndpoints are, for a full sync, the endpoints of UDP ports that the
// maps held (have) and want holds in no UDP group: GoneEndpoints from the
// last Sync's contents when there are some, else the backends of have that
// want has in no group at all (the maps do not say which are UDP).
func goneEndpoints(last *Contents, have *Maps, want *Contents) []BackendValue {
	if last != nil {
		var gone []BackendValue
		for _, at := range GoneEndpoints(last, want) {
			gone = append(gone, BackendValue{Addr: AddrOf(at.Addr()), Port: at.Port()})
		}
		return gone
	}
	still := make(map[BackendValue]bool, len(want.Maps().Backends))
	for _, v := range want.Maps().Backends {
		still[v] = true
	}
	seen := map[BackendValue]bool{}
	var gone []BackendValue
	for _, v := range have.Backends {
		if !still[v] && !seen[v] {
			seen[v] = true
			gone = append(gone, v)
		}
	}
	slices.SortFunc(gone, func(a, b BackendValue) int {
		return cmp.Or(compareAddr(a.Addr, b.Addr), cmp.Compare(a.Port, b.Port))
	})
	return gone
}

func puts(o Ops) int {
	return len(o.PutBackends) + len(o.PutNodeAddrs) + len(o.PutClusterAddrs) + len(o.PutServiceCIDRs) + len(o.PutServices)
}

// errNotMade is the error of an Executor that Dataplane.Executor did not
// make.
var errNotMade = errors.New("ebpf: Executor not made by Dataplane.Executor")

// made reports whether e was made by Dataplane.Executor.
func (e *Executor) made() bool { return e != nil && e.dp != nil }

// RequestFullSync makes the next Sync a full one.
func (e *Executor) RequestFullSync() {
	if e != nil {
		e.full = true
	}
}

// CheckState reads the family's elements back from the maps and says
// what differs from the last Sync, of kind svcproxy.DriftElement (the zero
// Drift when nothing, and before the first Sync).
func (e *Executor) CheckState(ctx context.Context) (svcproxy.Drift, error) {
	if !e.made() {
		return svcproxy.Drift{}, errNotMade
	}
	if e.last == nil {
		return svcproxy.Drift{}, nil
	}
	objs, err := e.dp.load()
	if err != nil {
		return svcproxy.Drift{}, err
	}
	have, err := readMaps(objs, e.family)
	if err != nil {
		return svcproxy.Drift{}, err
	}
	n := Diff(have, e.last.Maps()).Len()
	if e.lastNS != nil {
		ns, err := readNorthSouth(e.dp.tc, e.family, e.lastNS.Size)
		if err != nil {
			return svcproxy.Drift{}, err
		}
		sameTable := func(a, b *MaglevTable) bool { return a == b || *a == *b }
		if !maps.Equal(ns.Ext, e.lastNS.Ext) || !maps.EqualFunc(ns.Maglev, e.lastNS.Maglev, sameTable) || !maps.Equal(ns.Ranges, e.lastNS.Ranges) {
			n++
		}
	}
	if n == 0 {
		return svcproxy.Drift{}, nil
	}
	return svcproxy.Drift{Kind: svcproxy.DriftElement, What: fmt.Sprintf("%d %s map elements (or tc maps) missing, different or extra", n, e.family)}, nil
}

// Cleanup removes the programs, links, pins and maps of both families
// (Dataplane.Cleanup).
func (e *Executor) Cleanup(ctx context.Context) error {
	if !e.made() {
		return errNotMade
	}
	e.last, e.full = nil, true
	return e.dp.Cleanup()
}

// Close closes the Dataplane (Dataplane.Close); closing it twice is
// harmless.
func (e *Executor) Close() error {
	if !e.made() {
		return nil
	}
	return e.dp.Close()
}

// ofFamily reports whether a is of family.
func ofFamily(a Addr, family v1.IPFamily) bool { return a.Netip().Is4() == (family == v1.IPv4Protocol) }

// readMaps reads the elements of family from the maps.
func readMaps(o *sockObjects, family v1.IPFamily) (*Maps, error) {
	m := NewMaps()
	var errs []error
	var sk ServiceKey
	var sv ServiceValue
	it := o.SvcpServices.Iterate()
	for it.Next(&sk, &sv) {
		if ofFamily(sk.Addr, family) {
			m.Services[sk] = sv
		}
	}
	errs = append(errs, it.Err())
	var bk chunkKey
	var chunk backendChunk
	it = o.SvcpBackends.Iterate()
	for it.Next(&bk, &chunk) {
		if (bk.ID&v6Group != 0) != (family == v1.IPv6Protocol) {
			continue
		}
		for i, bv := range chunk {
			if bv != (BackendValue{}) {
				m.Backends[BackendKey{bk.ID, bk.Chunk*chunkSlots + uint32(i)}] = bv
			}
		}
	}
	errs = append(errs, it.Err())
	for _, set := range []struct {
		m   *cebpf.Map
		dst map[Addr]uint8
	}{{o.SvcpNodeAddrs, m.NodeAddrs}, {o.SvcpClusAddrs, m.ClusterAddrs}} {
		var a Addr
		var v uint8
		it = set.m.Iterate()
		for it.Next(&a, &v) {
			if ofFamily(a, family) {
				set.dst[a] = v
			}
		}
		errs = append(errs, it.Err())
	}
	var ck CIDRKey
	var v uint8
	it = o.SvcpSvcCidrs.Iterate()
	for it.Next(&ck, &v) {
		if ofFamily(ck.Addr, family) {
			m.ServiceCIDRs[ck] = v
		}
	}
	errs = append(errs, it.Err())
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("ebpf: reading the maps: %w", err)
	}
	return m, nil
}

// batchMin is the fewest elements applyOps writes or deletes in one batch
// call rather than one call each.
const batchMin = 64

// putAll writes values[i] under keys[i] into m: in batches of up to 4096
// when there are at least batchMin, else one by one.
func putAll[K, V any](m *cebpf.Map, keys []K, values []V) error {
	if len(keys) >= batchMin {
		for lo := 0; lo < len(keys); lo += 4096 {
			hi := min(lo+4096, len(keys))
			if _, err := m.BatchUpdate(keys[lo:hi], values[lo:hi], nil); err != nil {
				return fmt.Errorf("ebpf: writing %d elements into %s: %w", hi-lo, m, err)
			}
		}
		return nil
	}
	for i := range keys {
		if err := m.Put(keys[i], values[i]); err != nil {
			return fmt.Errorf("ebpf: writing %v into %s: %w", keys[i], m, err)
		}
	}
	return nil
}

// deleteAll deletes keys from m, in batches when there are at least
// batchMin; a key already gone is no error (a batch that meets one stops
// there, and its keys are deleted one by one instead).
func deleteAll[K any](m *cebpf.Map, keys []K) error {
	if len(keys) < batchMin {
		return deleteEach(m, keys)
	}
	for lo := 0; lo < len(keys); lo += 4096 {
		hi := min(lo+4096, len(keys))
		if _, err := m.BatchDelete(keys[lo:hi], nil); err != nil {
			if err := deleteEach(m, keys[lo:hi]); err != nil {
				return err
			}
		}
	}
	return nil
}

func deleteEach[K any](m *cebpf.Map, keys []K) error {
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, cebpf.ErrKeyNotExist) {
			return fmt.Errorf("ebpf: deleting %v from %s: %w", k, m, err)
		}
	}
	return nil
}

// split returns the keys and values of entries.
func split[K, V any](entries []Entry[K, V]) ([]K, []V) {
	keys, values := make([]K, len(entries)), make([]V, len(entries))
	for i, e := range entries {
		keys[i], values[i] = e.Key, e.Value
	}
	return keys, values
}

// ones is n values 1.
func ones(n int) []uint8 {
	v := make([]uint8, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// lookupChunk is the backends element ck, the zero chunk when there is
// none.
func lookupChunk(o *sockObjects, ck chunkKey) (backendChunk, error) {
	var c backendChunk
	if err := o.SvcpBackends.Lookup(ck, &c); err != nil && !errors.Is(err, cebpf.ErrKeyNotExist) {
		return backendChunk{}, fmt.Errorf("ebpf: reading backends element %v: %w", ck, err)
	}
	return c, nil
}

// applyOps applies ops in their order, with w the backends map's element
// changes that its backend slots make (packBackends), stopping at the
// first failing step: no service is written before the backends it
// points at, and no slot is cleared before the services stop pointing at
// it; between runs after the services' changes, before the slots are
// cleared. The writes before the services' (the backends and the sets) go
// on two goroutines when they are many, as in a first sync.
func applyOps(o *sockObjects, ops Ops, w chunkWrites, between func() error) error {
	sk, sv := split(ops.PutServices)
	half := len(w.PutKeys) / 2
	first := []func() error{
		func() error { return putAll(o.SvcpBackends, w.PutKeys[:half], w.PutValues[:half]) },
		func() error {
			return errors.Join(putAll(o.SvcpNodeAddrs, ops.PutNodeAddrs, ones(len(ops.PutNodeAddrs))),
				putAll(o.SvcpClusAddrs, ops.PutClusterAddrs, ones(len(ops.PutClusterAddrs))),
				putAll(o.SvcpSvcCidrs, ops.PutServiceCIDRs, ones(len(ops.PutServiceCIDRs))),
				putAll(o.SvcpBackends, w.PutKeys[half:], w.PutValues[half:]))
		},
	}
	steps := []func() error{
		func() error {
			if len(w.PutKeys)+len(ops.PutClusterAddrs) < concurrentMin {
				return errors.Join(first[0](), first[1]())
			}
			return concurrently(first...)
		},
		func() error { return putAll(o.SvcpServices, sk, sv) },
		func() error { return deleteAll(o.SvcpServices, ops.DelServices) },
		between,
		func() error { return putAll(o.SvcpBackends, w.ClearKeys, w.ClearValues) },
		func() error { return deleteAll(o.SvcpBackends, w.Delete) },
		func() error { return deleteAll(o.SvcpNodeAddrs, ops.DelNodeAddrs) },
		func() error { return deleteAll(o.SvcpClusAddrs, ops.DelClusterAddrs) },
		func() error { return deleteEach(o.SvcpSvcCidrs, ops.DelServiceCIDRs) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// concurrentMin is the fewest elements applyOps writes on two goroutines.
const concurrentMin = 8192

// concurrently runs fns each on a goroutine of its own and returns their
// errors joined.
func concurrently(fns ...func() error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(fns))
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
