// Package proxy is the program shared by the reference proxies
// (examples/iptables-proxy and examples/nftables-proxy): flags, input
// sources (with a manifest watcher that applies files only once they have
// settled), change tracking, and the wiring of the public packages: an
// engine.Engine that syncs the state to the Mode's backends (rate-limited,
// with a periodic check that repairs what others changed, retries that
// back off, conntrack cleanup, health and metrics), healthcheck's servers
// for the health check node ports, and the metrics and healthz servers.
// Only the Mode, which renders a Ruleset and makes the backends, differs
// between them.
//
// It is example code, the way a CNI author would wire the library: it logs,
// reads files, serves HTTP and runs the executors; the library packages it
// calls do none of that.
package proxy
