// Package bench holds the kernel-scale benchmark of issue 8: it applies
// Rulesets of N generated Services × 10 endpoints (internal/testkit/scalegen) to a real
// kernel through the iptables and nftables Executors, inside network
// namespaces it creates, and measures full syncs, incremental syncs (one
// Service changed, one Service added) and the first-packet latency of a
// connect() to the last Service. In the same run it runs the kernel floors of
// /work/shared/bench-floors (restore.sh and latency.sh, hand-made rulesets of
// the same size) and reports every figure with its ratio to the floor.
//
// It is not part of the default test run: it needs the build tag "scale", root,
// ip, iptables and nft.
//
//	go test -tags scale ./bench/ -run Scale -v -timeout 60m
//	SVCPROXY_SCALE_N=1000,5000,10000 go test -tags scale ./bench/ -run Scale -v -timeout 60m
//
// Settings (environment):
//
//	SVCPROXY_SCALE_N            Service counts, comma-separated (default 1000)
//	SVCPROXY_SCALE_REPS         incremental syncs of each kind per N (default 5)
//	SVCPROXY_SCALE_CONNS        measured connects per target (default 200)
//	SVCPROXY_SCALE_FLOORS       which floor scripts to run: "restore latency" (default), "" for none
//	SVCPROXY_SCALE_FLOORS_DIR   where they are (default /work/shared/bench-floors)
//	SVCPROXY_SCALE_FLOOR_REPS   REPS for restore.sh (default 3)
//	SVCPROXY_SCALE_FLOOR_ONLY   ONLY for restore.sh (default: the configurations compared with)
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
// Every namespace it makes is removed at the end, on failure too; the floor
// scripts remove theirs (kpb-*), and any the scripts leave behind that did not
// exist before are removed after them.
package bench
