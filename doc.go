// Package svcproxy is an embeddable library of Kubernetes Service-proxy
// primitives: the parts of kube-proxy that every CNI or Service-proxy author
// needs, as small packages that decide (pure, deterministic,
// property-tested) and thin executors that apply.
//
// Data flows in one direction:
//
//	v1.Service ─────────────► servicemap ─┐
//	discovery/v1.EndpointSlice ► endpoints ─┤
//	v1.Node (name, zone) ───────────────────┤
//	                                        ▼
//	        topology  which endpoints serve cluster and node-local traffic
//	        affinity  ClientIP session affinity
//	                                        ▼
//	        ruleset.Builder.Build ──► ruleset.Ruleset (one IP family)
//	                                        │ ruleset.Diff(old, new)
//	          ┌─────────────────────────────┼──────────────────────────┐
//	          ▼                             ▼                          ▼
//	  iptables: Render → text     nftables: Render → knftables   conntrack: stale
//	  executor: iptables-restore  executor: nft                  entries, sizing
//
// servicemap converts each Service into ServicePorts, one per port and IP
// family, as net/netip values; endpoints merges the EndpointSlices of each
// Service into the endpoints of each ServicePort. Both have change trackers
// that take adds, updates and deletes in any order and hand out immutable
// snapshots with what changed. topology decides, exactly as kube-proxy does,
// which endpoints take cluster-wide and node-local traffic (ready endpoints,
// else serving terminating ones; traffic policies; topology hints).
// ruleset turns the snapshots into the desired state of one IP family,
// independent of the backend; the backends render it and apply it. trace
// answers, from a Ruleset alone, where a given packet goes: the
// specification the backends' rules meet, and what a data plane outside
// netfilter implements.
//
// The inputs come from manifests (files) or source (an API server, through
// client-go informers) into a state.State, which keeps the trackers of both
// IP families, the node and the Service CIDRs, and hands a sync one
// snapshot per family for ruleset.Builder; state.Builder builds each
// family's Ruleset from those snapshots, incrementally. engine runs the sync loop over
// any data plane that implements engine.Backend (both executors do; so does
// examples/userspace-proxy, a data plane outside netfilter): coalescing,
// periodic state checks and repair, retries, conntrack cleanup, health and
// metrics. trace/iptrace and trace/nfttrace evaluate each backend's rules,
// rendered or read back from the kernel, and give the same trace.Outcome as
// the tracer.
//
// Objects that cannot be used are skipped and reported as Warnings; they
// never stop the other Services from being served, and nothing in a Service
// or EndpointSlice can inject text into rendered rules. The packages that
// decide do no I/O, read no clock, use no randomness and log nothing: the
// same input gives byte-identical output, whatever order objects arrived in.
//
// The reference proxies under examples/ wire it all together; examples/demo
// prints the decisions for the bundled demo manifests.
//
// The packages stand in layers, bottom up: this package, affinity and
// internal helpers; servicemap, endpoints, topology and ruleset; trace and
// its evaluators; the backends (iptables, nftables), conntrack and
// healthcheck; state, manifests, source and engine; examples/. An import
// never goes up: docs/architecture.md draws the layers and layers_test.go
// checks every import, test files' too, against them.
package svcproxy
