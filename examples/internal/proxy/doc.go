// Package proxy is the program shared by the reference proxies
// (examples/iptables-proxy and examples/nftables-proxy): flags, input
// sources (with a manifest watcher that applies files only once they have
// settled), change tracking, the sync loop (rate-limited, with a periodic
// full sync that repairs what others changed, and retries that back off),
// metrics and health servers. Only the Mode, which renders and applies a
// Ruleset, differs between them.
//
// It is example code, the way a CNI author would wire the library: it logs,
// reads files, serves HTTP and runs the executors; the library packages it
// calls do none of that.
package proxy
