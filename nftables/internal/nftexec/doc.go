// Package nftexec is what the executors of both nftables layouts share
// (nftables.Executor, kube-proxy's layout, and flat.Executor): opening nft
// after checking the host (Open), running it and netlink sockets in another
// network namespace, and a Table handle that lists the table's names, checks
// that named chains and sets are there, replaces and deletes the table. It
// holds no policy: which names to check and what to write are the layouts'.
package nftexec
