//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/internal/testkit/apiserver"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// deployNamespace and deployAccount are where deploy/ puts the proxy's
// ServiceAccount.
const (
	deployNamespace = "kube-system"
	deployAccount   = "svcproxy"
)

// TestAPIServerDeployRBAC applies deploy/ to an API server that authorizes
// with RBAC, then runs the nftables proxy as the DaemonSet would: its
// command line, its one capability, its kubeconfig, and a token of its
// ServiceAccount from the TokenRequest API. The role is enough (the proxy
// syncs and serves, its probes and metrics port answer 200), grants only
// reads, and each of its rules is needed:
// without it the proxy is refused and says which permission it lacks.
func TestAPIServerDeployRBAC(t *testing.T) {
	ac := newAPICluster(t, netns.ClusterSpec{Pods: 1}, apiserver.Options{Authorization: "RBAC"})
	ac.StartEcho(echoPort)
	objs := deployObjects(t)
	dyn, err := dynamic.NewForConfig(ac.api.RESTConfig(ac.api.Token(apiserver.AdminUser)))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		// kube-system appears shortly after the API server is ready.
		waitFor(t, "deploy/ to apply", func() (bool, string) {
			err := applyUnstructured(dyn, o)
			return err == nil, fmt.Sprint(err)
		})
	}
	var role rbacv1.ClusterRole
	var ds appsv1.DaemonSet
	var kubeconfigMap v1.ConfigMap
	decodeKind(t, objs, "ClusterRole", &role)
	decodeKind(t, objs, "DaemonSet", &ds)
	decodeKind(t, objs, "ConfigMap", &kubeconfigMap)
	expectReadOnly(t, role)

	ac.put(apiService("web", 60))
	ac.put(slice("web", false, v1.ProtocolTCP, ready(ac.Cluster, ac.Pods[0])))
	kubeconfig := deployedKubeconfig(t, ac, kubeconfigMap.Data["kubeconfig"], deployAccount)
	p := runDeployed(t, ac, ds, kubeconfig)
	p.waitSyncs(1)
	eventuallyReaches(t, ac.Clients[0], at(serviceIP(false, 60), 80), ac.Pods[0])
	expectProbesAnswer(t, ac, ds)
	if strings.Contains(p.log.String(), "forbidden") {
		t.Errorf("the proxy was refused something with the full role:\n%s", p.log.String())
	}
	stopProxy(t, p)

	for i, rule := range role.Rules {
		t.Run(strings.Join(rule.Resources, ","), func(t *testing.T) {
			reduced := role.DeepCopy()
			reduced.Rules = slices.Delete(reduced.Rules, i, i+1)
			applyRole(t, dyn, reduced)
			defer applyRole(t, dyn, &role)
			verb, resource := rule.Verbs[len(rule.Verbs)-1], rule.Resources[0]
			waitDenied(t, ac, rule.APIGroups[0], resource, verb)
			p := runDeployed(t, ac, ds, kubeconfig)
			refused := regexp.MustCompile(`cannot (get|list|watch) resource \\?"` + resource + `\\?"`)
			waitFor(t, "the proxy to say it may not read "+resource, func() (bool, string) {
				return refused.MatchString(p.log.String()), p.log.String()
			})
			t.Logf("without the rule: %s", refused.FindString(p.log.String()))
			stopProxy(t, p)
		})
	}
}

// deployObjects reads every object of the YAML files in deploy/.
func deployObjects(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	paths, err := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(file)), "deploy", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("deploy/*.yaml: %v (%d files)", err, len(paths))
	}
	var objs []*unstructured.Unstructured
	for _, path := range paths {
		objs = append(objs, yamlObjects(t, path)...)
	}
	return objs
}

// yamlObjects reads the objects of the YAML file at path.
func yamlObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---\n") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(js); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		objs = append(objs, o)
	}
	return objs
}

// deployResources are the resources of the kinds deploy/ holds.
var deployResources = map[string]schema.GroupVersionResource{
	"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
	"ConfigMap":          {Version: "v1", Resource: "configmaps"},
	"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"DaemonSet":          {Group: "apps", Version: "v1", Resource: "daemonsets"},
}

// applyUnstructured server-side-applies o, as `kubectl apply
// --server-side` would.
func applyUnstructured(dyn dynamic.Interface, o *unstructured.Unstructured) error {
	gvr, ok := deployResources[o.GetKind()]
	if !ok {
		return fmt.Errorf("deploy/: unexpected kind %s", o.GetKind())
	}
	data, err := o.MarshalJSON()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	force := true
	_, err = dyn.Resource(gvr).Namespace(o.GetNamespace()).Patch(ctx, o.GetName(), types.ApplyPatchType, data,
		metav1.PatchOptions{FieldManager: "svcproxy-e2e", Force: &force})
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
	}
	return nil
}

// applyRole server-side-applies role.
func applyRole(t *testing.T, dyn dynamic.Interface, role *rbacv1.ClusterRole) {
	t.Helper()
	role = role.DeepCopy()
	role.TypeMeta = metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}
	raw, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(role)
	if err != nil {
		t.Fatal(err)
	}
	if err := applyUnstructured(dyn, &unstructured.Unstructured{Object: raw}); err != nil {
		t.Fatal(err)
	}
}

// decodeKind decodes the one object of kind in objs into into.
func decodeKind(t *testing.T, objs []*unstructured.Unstructured, kind string, into any) {
	t.Helper()
	i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind })
	if i < 0 {
		t.Fatalf("deploy/ has no %s", kind)
	}
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(objs[i].Object, into); err != nil {
		t.Fatalf("deploy/ %s: %v", kind, err)
	}
}

// expectReadOnly checks that role grants nothing but reads of named
// resources: no wildcard, no verb besides get, list and watch.
func expectReadOnly(t *testing.T, role rbacv1.ClusterRole) {
	t.Helper()
	for _, r := range role.Rules {
		for _, verb := range r.Verbs {
			if !slices.Contains([]string{"get", "list", "watch"}, verb) {
				t.Errorf("ClusterRole %s: rule %+v grants %q", role.Name, r, verb)
			}
		}
		if slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "*") || len(r.NonResourceURLs) > 0 {
			t.Errorf("ClusterRole %s: rule %+v is wider than named resources", role.Name, r)
		}
	}
}

// waitDenied waits until the API server's authorizer refuses verb on
// resource to the proxy's ServiceAccount (a role change reaches it
// asynchronously).
func waitDenied(t *testing.T, ac *apiCluster, group, resource, verb string) {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + deployNamespace + ":" + deployAccount,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Group: group, Resource: resource, Verb: verb},
	}}
	waitFor(t, fmt.Sprintf("%s on %s to be denied", verb, resource), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got, err := ac.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		return !got.Status.Allowed, fmt.Sprintf("%+v", got.Status)
	})
}

// deployedKubeconfig is the kubeconfig text of a deploy/ ConfigMap with the
// test's API server address and CA, and a file holding a token of the
// ServiceAccount kube-system/account from the TokenRequest API in place of
// the projected one.
func deployedKubeconfig(t *testing.T, ac *apiCluster, kubeconfig, account string) string {
	t.Helper()
	cfg, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		t.Fatalf("deploy/ kubeconfig: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	expiry := int64(3600)
	tr, err := ac.client.CoreV1().ServiceAccounts(deployNamespace).CreateToken(ctx, account,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", deployNamespace, account, err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	current := cfg.Contexts[cfg.CurrentContext]
	if current == nil || cfg.Clusters[current.Cluster] == nil || cfg.AuthInfos[current.AuthInfo] == nil {
		t.Fatalf("deploy/ kubeconfig: current context %q is incomplete", cfg.CurrentContext)
	}
	cluster, user := cfg.Clusters[current.Cluster], cfg.AuthInfos[current.AuthInfo]
	if user.TokenFile == "" || user.Token != "" {
		t.Fatalf("deploy/ kubeconfig: want the projected token file, got %+v", user)
	}
	cluster.Server = "https://" + ac.api.Addr.String()
	cluster.CertificateAuthority, cluster.CertificateAuthorityData = "", ac.api.CACert()
	user.TokenFile = tokenFile
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// runDeployed runs the nftables proxy in the node namespace with the
// DaemonSet's arguments ($(VAR)s resolved as the kubelet would, the
// kubeconfig's path replaced by kubeconfig) and only the capabilities its
// container adds (through setpriv's bounding set).
func runDeployed(t *testing.T, ac *apiCluster, ds appsv1.DaemonSet, kubeconfig string) *proxy {
	t.Helper()
	container := ds.Spec.Template.Spec.Containers[0]
	vars := map[string]string{"NODE_NAME": nodeName, "NODE_IP": ac.Node.IPv4.String()}
	var args []string
	for _, a := range container.Args {
		for name, value := range vars {
			a = strings.ReplaceAll(a, "$("+name+")", value)
		}
		if strings.HasPrefix(a, "--kubeconfig=") {
			a = "--kubeconfig=" + kubeconfig
		}
		args = append(args, a)
	}
	var caps []string
	for _, c := range container.SecurityContext.Capabilities.Add {
		caps = append(caps, "+"+strings.ToLower(string(c)))
	}
	bounding := "-all," + strings.Join(caps, ",")
	p := &proxy{t: t, backend: "nftables", node: ac.Node, dir: t.TempDir(), log: &logBuffer{}, nodeObj: nodeObject()}
	cmdArgs := append([]string{"--bounding-set=" + bounding, "--", proxyBinary(t, "nftables")}, args...)
	cmd := ac.Node.Command(context.Background(), "setpriv", cmdArgs...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	proc, err := ac.Node.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	p.proc = proc
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("deployed proxy (%v) output:\n%s", cmd.Args, p.log.String())
		}
	})
	return p
}

// expectProbesAnswer checks, from the node, that the DaemonSet's liveness
// and readiness probes and its metrics port get 200 from the running proxy.
func expectProbesAnswer(t *testing.T, ac *apiCluster, ds appsv1.DaemonSet) {
	t.Helper()
	container := ds.Spec.Template.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range container.Ports {
		ports[p.Name] = p.ContainerPort
	}
	urls := map[string]string{"metrics": fmt.Sprintf("http://%s:%d/metrics", ac.Node.IPv4, ports["metrics"])}
	for name, probe := range map[string]*v1.Probe{"liveness": container.LivenessProbe, "readiness": container.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Fatalf("DaemonSet: no HTTP %s probe", name)
		}
		urls[name] = fmt.Sprintf("http://%s:%d%s", ac.Node.IPv4, ports[probe.HTTPGet.Port.String()], probe.HTTPGet.Path)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, _, address string) (net.Conn, error) {
			return ac.Node.Dial("tcp", netip.AddrPort{}, netip.MustParseAddrPort(address), 5*time.Second)
		},
	}}
	defer client.CloseIdleConnections()
	for name, url := range urls {
		resp, err := client.Get(url)
		if err != nil {
			t.Errorf("%s (%s): %v", name, url, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s (%s): %s, want 200", name, url, resp.Status)
		}
	}
}

// stopProxy kills the proxy's process group, by its PID.
func stopProxy(t *testing.T, p *proxy) {
	t.Helper()
	if err := p.proc.Stop(); err != nil {
		t.Fatal(err)
	}
}
