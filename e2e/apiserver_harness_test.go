//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/svcproxy/svcproxy/internal/testkit/apiserver"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// proxyUser is the static-token user the proxies of the API-server tests
// authenticate as; its requests are in the audit log.
const proxyUser = "svcproxy"

// apiCluster is a netns Cluster with etcd and kube-apiserver running in its
// node namespace, where the proxy runs too.
type apiCluster struct {
	*netns.Cluster
	t      *testing.T
	api    *apiserver.Server
	client kubernetes.Interface
}

// newAPICluster builds the cluster of spec, starts the servers with opts
// (plus proxyUser, audited), and creates the e2e Namespace and the proxy's
// Node (nodeObject: zone-a).
func newAPICluster(t *testing.T, spec netns.ClusterSpec, opts apiserver.Options) *apiCluster {
	t.Helper()
	apiserver.Require(t)
	c := netns.NewCluster(t, spec)
	opts.Users = append(opts.Users, proxyUser)
	opts.AuditUsers = append(opts.AuditUsers, proxyUser)
	api := apiserver.Start(t, c.Node.NS, c.Node.IPv4, opts)
	ac := &apiCluster{Cluster: c, t: t, api: api, client: api.Client()}
	ac.put(&v1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "e2e"}})
	ac.put(nodeObject())
	return ac
}

// startProxy runs the backend's proxy on the node with --kubeconfig for
// token (proxyUser's when empty) and waits for its first sync.
func (ac *apiCluster) startProxy(backend, token string, args ...string) *proxy {
	ac.t.Helper()
	if token == "" {
		token = ac.api.Token(proxyUser)
	}
	return startProxyWith(ac.t, ac.Cluster, backend, proxySetup{kubeconfig: ac.api.Kubeconfig(token), args: args})
}

// apiService is service() made valid for the API server: its two cluster
// IPs (198.19.0.n and 2001:db8:19::n) need RequireDualStack.
func apiService(name string, n byte, opts ...serviceOpt) *v1.Service {
	svc := service(name, ips(n), opts...)
	policy := v1.IPFamilyPolicyRequireDualStack
	svc.Spec.IPFamilyPolicy = &policy
	return svc
}

// withZoneHints gives every endpoint of es that has a zone the zone hint
// of its own zone, as the EndpointSlice controller does for the
// trafficDistribution PreferSameZone.
func withZoneHints(es *discovery.EndpointSlice) *discovery.EndpointSlice {
	for i, ep := range es.Endpoints {
		if ep.Zone != nil {
			es.Endpoints[i].Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: *ep.Zone}}}
		}
	}
	return es
}

// put creates or updates obj with server-side apply (field manager
// "svcproxy-e2e", conflicts forced), failing the test on error.
func (ac *apiCluster) put(obj any) {
	ac.t.Helper()
	if err := apply(ac.client, obj); err != nil {
		ac.t.Fatal(err)
	}
}

// apply server-side-applies obj, one of the kinds the tests use, with its
// TypeMeta set.
func apply(client kubernetes.Interface, obj any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if es, ok := obj.(*discovery.EndpointSlice); ok && es.Endpoints == nil {
		es = es.DeepCopy()
		es.Endpoints = []discovery.Endpoint{} // null is not an empty list to apply
		obj = es
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	force := true
	po := metav1.PatchOptions{FieldManager: "svcproxy-e2e", Force: &force}
	switch o := obj.(type) {
	case *v1.Namespace:
		_, err = client.CoreV1().Namespaces().Patch(ctx, o.Name, types.ApplyPatchType, data, po)
	case *v1.Node:
		_, err = client.CoreV1().Nodes().Patch(ctx, o.Name, types.ApplyPatchType, data, po)
	case *v1.Service:
		_, err = client.CoreV1().Services(o.Namespace).Patch(ctx, o.Name, types.ApplyPatchType, data, po)
	case *discovery.EndpointSlice:
		_, err = client.DiscoveryV1().EndpointSlices(o.Namespace).Patch(ctx, o.Name, types.ApplyPatchType, data, po)
	case *networkingv1.ServiceCIDR:
		_, err = client.NetworkingV1().ServiceCIDRs().Patch(ctx, o.Name, types.ApplyPatchType, data, po)
	default:
		return fmt.Errorf("apply: unexpected %T", obj)
	}
	if err != nil {
		return fmt.Errorf("applying %T: %w", obj, err)
	}
	return nil
}

// remove deletes obj and waits until it is gone, failing the test on error.
func (ac *apiCluster) remove(obj any) {
	ac.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	switch o := obj.(type) {
	case *v1.Service:
		err = ac.client.CoreV1().Services(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
	case *discovery.EndpointSlice:
		err = ac.client.DiscoveryV1().EndpointSlices(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{})
	case *networkingv1.ServiceCIDR:
		err = ac.client.NetworkingV1().ServiceCIDRs().Delete(ctx, o.Name, metav1.DeleteOptions{})
	default:
		err = fmt.Errorf("unexpected %T", obj)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		ac.t.Fatalf("deleting %T: %v", obj, err)
	}
}

// convergeTimeout bounds how long a proxy is given to follow a change made
// through the API.
const convergeTimeout = 30 * time.Second

// eventuallyReaches waits, at most convergeTimeout, until 20 connections in
// a row from d to addr all succeed and reach exactly pods.
func eventuallyReaches(t *testing.T, d dialer, addr netip.AddrPort, pods ...*netns.Host) {
	t.Helper()
	eventuallyReachesWithin(t, d, addr, convergeTimeout, pods...)
}

// eventuallyReachesWithin is eventuallyReaches waiting at most timeout.
func eventuallyReachesWithin(t *testing.T, d dialer, addr netip.AddrPort, timeout time.Duration, pods ...*netns.Host) {
	t.Helper()
	var want []string
	for _, p := range pods {
		want = append(want, p.Label)
	}
	slices.Sort(want)
	var last string
	waitForWithin(t, timeout, fmt.Sprintf("connections to %s to reach exactly %v", addr, want), func() (bool, string) {
		counts := map[string]int{}
		for range 20 {
			r, err := d.TCP(addr, connectTimeout)
			if err != nil {
				last = fmt.Sprintf("error %v after %v", err, counts)
				return false, last
			}
			counts[r.Identity]++
		}
		got := slices.Sorted(maps.Keys(counts))
		last = fmt.Sprintf("reached %v", counts)
		return slices.Equal(got, want), last
	})
}

// eventuallyFails waits, at most convergeTimeout, until a TCP connection
// from d to addr fails with want (netns.ErrRefused or netns.ErrTimeout).
func eventuallyFails(t *testing.T, d dialer, addr netip.AddrPort, want error) {
	t.Helper()
	waitFor(t, fmt.Sprintf("connections to %s to fail with %v", addr, want), func() (bool, string) {
		r, err := d.TCP(addr, dropTimeout)
		return errors.Is(err, want), fmt.Sprintf("reply %+v, error %v", r, err)
	})
}

// waitFor calls check every 100 ms until it reports done, for at most
// convergeTimeout, and fails the test with what and check's last report
// otherwise.
func waitFor(t *testing.T, what string, check func() (done bool, report string)) {
	t.Helper()
	waitForWithin(t, convergeTimeout, what, check)
}

// waitForWithin is waitFor waiting at most timeout.
func waitForWithin(t *testing.T, timeout time.Duration, what string, check func() (done bool, report string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, report := check()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; last: %s", timeout, what, report)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
