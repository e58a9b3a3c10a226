// Package proxy is the program shared by the reference proxies
// (examples/iptables-proxy and examples/nftables-proxy): flags, input
// sources, change tracking, the rate-limited sync loop, metrics and health
// servers. Only the Mode, which renders and applies a Ruleset, differs
// between them.
//
// It is example code, the way a CNI author would wire the library: it logs,
// reads files, serves HTTP and runs the executors; the library packages it
// calls do none of that.
package proxy
