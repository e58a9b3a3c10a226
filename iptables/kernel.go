package iptables

// kube-proxy's nfacct counters (its iptables mode's): the names of the
// kernel's accounting objects that rules count packets into with
// `-m nfacct --nfacct-name`.
const (
	// CounterInvalidDropped counts the packets KUBE-FORWARD drops because
	// conntrack found them INVALID.
	CounterInvalidDropped = "ct_state_invalid_dropped_pkts"
	// CounterLocalhostNodePorts counts the packets to node ports on
	// 127.0.0.0/8 that KUBE-NODEPORTS accepts (IPv4).
	CounterLocalhostNodePorts = "localhost_nps_accepted_pkts"
)

// nfacctCounters are kube-proxy's nfacct counters, in the order the Executor
// creates them.
var nfacctCounters = [...]string{CounterInvalidDropped, CounterLocalhostNodePorts}

// Kernel is what a render needs to know of the kernel its rules go to,
// where kube-proxy's rules depend on it. The zero Kernel has no nfacct
// counters and nf_conntrack_tcp_be_liberal unset: the rules Render writes.
type Kernel struct {
	// InvalidDroppedCounter says the CounterInvalidDropped object exists:
	// KUBE-FORWARD's drop of INVALID packets counts into it.
	InvalidDroppedCounter bool
	// LocalhostNodePortsCounter says the CounterLocalhostNodePorts object
	// exists: with ruleset.Config.LocalhostNodePorts (IPv4), each node
	// port's rule in KUBE-NODEPORTS follows one for destinations in
	// 127.0.0.0/8 that counts into it and goes to the same chain.
	LocalhostNodePortsCounter bool
	// TCPBeLiberal says nf_conntrack_tcp_be_liberal is set: conntrack
	// then marks only out-of-window RST segments INVALID, and KUBE-FORWARD
	// does not drop INVALID packets.
	TCPBeLiberal bool
}

// withCounter returns k with the counter name present or not.
func (k Kernel) withCounter(name string, present bool) Kernel {
	switch name {
	case CounterInvalidDropped:
		k.InvalidDroppedCounter = present
	case CounterLocalhostNodePorts:
		k.LocalhostNodePortsCounter = present
	}
	return k
}

// nfacct writes the match that counts into the counter name.
func (r *renderer) nfacct(name string) {
	r.str(" -m nfacct --nfacct-name " + name)
}
