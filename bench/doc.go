// Package bench is the kernel-scale benchmark: it applies Rulesets of N
// generated Services × 10 endpoints (internal/testkit/scalegen) to a real
// kernel through the iptables and nftables Executors, inside network
// namespaces it creates (internal/testkit/netns), and measures full syncs,
// incremental syncs (one Service changed, one Service added) and the
// first-packet latency of a connect() to the first and the last Service. In
// the same run it measures the kernel floors and reports every figure with
// its ratio to its floor.
//
// # Floors
//
// The floors are what the kernel and its tools cost for the least ruleset a
// proxy with kube-proxy's layout loads for the same Services: hand-made NAT
// rules (floorRules: cluster-IP DNAT only, the same cluster IPs and endpoint
// addresses as scalegen's), written to files beforehand and loaded, each
// configuration in fresh namespaces of its own, by the tools themselves.
// Each load is timed around its `ip netns exec`, as the Executors' commands
// are. The restore group (ms):
//
//	iptnft-flush-full            iptables-restore (nf_tables) of the whole ruleset
//	iptnft-noflush-full          the same with --noflush (quadratic in iptables 1.8.9: minutes at 5,000)
//	legacy-noflush-full          iptables-legacy-restore --noflush of the whole ruleset
//	iptnft-noflush-partial-add1  iptables-restore --noflush adding one Service to the loaded table
//	                             (KUBE-SERVICES rewritten whole, as in kube-proxy's partial syncs)
//	legacy-noflush-partial-add1  the same with iptables-legacy-restore
//	nft-full-1tx                 nft -f of the whole table in one transaction
//	nft-full-chunked1000         nft -f in transactions of 1,000 Services
//	nft-add1-E1, nft-add1-E10    nft -f adding one Service of 1 or 10 endpoints to the loaded table
//
// Repetition r of an addition adds Service N+r to the same table. A
// configuration repeats until SVCPROXY_SCALE_FLOOR_REPS runs or 2 minutes
// of timed runs, whichever comes first; a command that takes more than 20
// minutes is stopped and leaves the configuration without a figure. The
// iptables-legacy configurations are left out when iptables-legacy-restore
// is not installed.
//
// The latency group (µs): a client, a node and three pods with echo servers
// (netns.NewCluster), the node loaded with the floor ruleset of N Services
// whose 3 endpoints are the pods (nat PREROUTING jumps to KUBE-SERVICES, or
// the nft table's own prerouting chain), and the median of
// SVCPROXY_SCALE_CONNS connect() calls after 20 warm-up ones to the last
// Service (lat-<mode>-last-svc), the first (…-first-svc) and a pod directly
// (…-pod-direct), for the modes nft, iptnft and legacy (configurations
// lat-nft, lat-iptnft, lat-legacy), with the probe that times our rules.
//
// # Running
//
// It is not part of the default test run: it needs the build tag "scale", root,
// ip, iptables and nft (TestFloorRulesRoute, in the same build, checks
// that the floor rulesets route packets with each tool).
//
//	go test -tags scale ./bench/ -run Scale -v -timeout 60m
//	SVCPROXY_SCALE_N=1000,5000,10000 go test -tags scale ./bench/ -run Scale -v -timeout 60m
//
// Settings (environment):
//
//	SVCPROXY_SCALE_N            Service counts, comma-separated (default 1000)
//	SVCPROXY_SCALE_REPS         incremental syncs of each kind per N (default 5)
//	SVCPROXY_SCALE_CONNS        measured connects per target (default 200)
//	SVCPROXY_SCALE_FLOORS       which floor groups to run: "restore latency" (default), "" for none
//	SVCPROXY_SCALE_FLOOR_REPS   repetitions of each restore configuration (default 3)
//	SVCPROXY_SCALE_FLOOR_ONLY   regular expression of the floor configurations to run (default:
//	                            the ones the report compares with; "." for all)
//	SVCPROXY_SCALE_NFT_CHUNKS   chunk sizes (comma-separated) to compare for nftables first
//	                            syncs over netlink, each timed twice, interleaved (default none)
//	SVCPROXY_SCALE_NFT_BULK     counts of Services (comma-separated) whose endpoints one
//	                            incremental sync over netlink changes, timed for each
//	                            ChangeChunk of SVCPROXY_SCALE_NFT_BULK_CHUNKS, each in a fresh
//	                            lab against its own first sync; the first lab also times a
//	                            full resync if N <= SVCPROXY_SCALE_NFT_RESYNC (default none)
//	SVCPROXY_SCALE_NFT_BULK_CHUNKS  ExecutorConfig.ChangeChunk values (comma-separated) for
//	                            SVCPROXY_SCALE_NFT_BULK: 0 the default, -1 one transaction
//	                            (default "0,-1")
//	SVCPROXY_SCALE_NFT_RESYNC   largest N at which to time an nftables full resync of the
//	                            loaded table (default 5000; its floor, nft-full-1tx, takes
//	                            minutes at 10,000)
//	SVCPROXY_SCALE_OUT          also write the summary (Markdown) to this file
//
// The floors of each N run just before our figures for that N. The summary
// ends with every floor measured. Every namespace it makes is removed, on
// failure too: each floor's namespaces as soon as it has been measured,
// after their rulesets are flushed.
package bench
