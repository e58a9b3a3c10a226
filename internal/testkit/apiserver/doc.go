// Package apiserver runs a real etcd and kube-apiserver for end-to-end tests,
// inside a network namespace the test made (see package netns), so that
// reference proxies running in that namespace reach them.
//
// # Use
//
//	c := netns.NewCluster(t, netns.ClusterSpec{Pods: 2})
//	api := apiserver.Start(t, c.Node.NS, c.Node.IPv4, apiserver.Options{})
//	client := api.Client()                      // as "admin" (system:masters)
//	kubeconfig := api.Kubeconfig(api.Token(apiserver.AdminUser))
//	// run the proxy in c.Node with --kubeconfig kubeconfig
//
// # What Start guarantees
//
// etcd listens on 127.0.0.1:2379 of the namespace and the API server on
// the address given, port 6443, with a throwaway CA and serving certificate
// (crypto/x509, ECDSA), a static token file (AdminUser in system:masters,
// plus Options.Users in no group), service-account signing keys (so the
// TokenRequest API works), --service-cluster-ip-range inside 198.19.0.0/16
// and 2001:db8::/32, and --endpoint-reconciler-type=none: the
// default/kubernetes Service has no endpoints. Start returns once etcd is
// healthy and /readyz answers ok, each waited for at most 90 s with a
// bounded poll. Both servers are stopped by PID (SIGTERM, then SIGKILL of
// the process group) by t.Cleanup, whatever the outcome; their files live in
// t.TempDir and go with it. The test process reaches the servers by dialling
// from inside the namespace: it needs no route into it.
//
// The binaries come from the directory named by $SVCPROXY_APISERVER_BIN_DIR,
// which e2e/apiserver/build.sh prints. Without them a test skips with how to
// build them, or fails under SVCPROXY_E2E=required.
package apiserver
