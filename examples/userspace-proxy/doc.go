// Command userspace-proxy serves Kubernetes Services from user space: a
// pure-Go L4 proxy for TCP and UDP built only on svcproxy's public packages:
// a manifests.Watcher feeds a state.State, a state.Builder builds the
// Rulesets of both IP families from it, and the engine syncs the DataPlane,
// the Backend of both, with them. It listens on every frontend the node serves (cluster IPs, external
// and load-balancer IPs, node ports on the node's addresses) and forwards
// each new TCP connection, or each UDP flow (a client address and port,
// ended after 30 s idle), to a target picked with the Ruleset's decisions
// and shares, honouring Local traffic policies, load-balancer source ranges
// and ClientIP affinity.
//
// What it does to the node: it adds a route of type local (table local,
// protocol 177) to each cluster, external and load-balancer IP it serves, so
// that the kernel delivers their packets to its sockets, and removes them on
// exit (and, on start, those that a proxy which died left behind). It needs
// root for that alone.
//
// Where it differs from the kernel backends: every flow is masqueraded (a
// proxy's targets see the proxy's address), so externalTrafficPolicy Local
// picks local targets but does not preserve the client's address. A Service
// without endpoints gets no socket, so the kernel refuses its TCP
// connections with a reset and its UDP datagrams with ICMP port unreachable;
// so it does on the ports of a served address that no Service serves.
// A dropped TCP connection has completed its handshake with the kernel
// before the proxy sees it: it is held unanswered for 30 s, then reset. A
// load-balancer IP at the unspecified address (0.0.0.0 or ::, which the API
// server accepts) is not served: a socket there would take the port on
// every address of the node. SCTP is not served, nor are healthz, metrics and health check node ports; of
// the reference proxies' flags it takes --manifests, --node-name, --node-ip,
// --cluster-cidr, --sync-period and --dry-run.
//
//	go run ./examples/userspace-proxy --manifests examples/demo/manifests --node-name node-a --dry-run
package main
