//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/svcproxy/svcproxy/internal/testkit/apiserver"
	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// TestAPIServerKubeProxySwap: the drop-in for kube-proxy's DaemonSet.
// deploy/kube-proxy/kubeadm.yaml (what kubeadm installs for kube-proxy) is
// applied to an API server that authorizes with RBAC and patched with
// deploy/kube-proxy/swap.yaml; the patch changes the image and the command
// only (the ConfigMap, ServiceAccount, volumes and privileges stay). The
// patched container's command then runs, with the ConfigMap's files where
// its volume mounts them and a token of kube-proxy's ServiceAccount (bound
// to system:node-proxier, kube-proxy's role): it reads config.conf,
// connects through kubeconfig.conf, syncs and serves a Service, and is
// refused nothing.
func TestAPIServerKubeProxySwap(t *testing.T) {
	ac := newAPICluster(t, netns.ClusterSpec{Pods: 1}, apiserver.Options{Authorization: "RBAC", AllowPrivileged: true})
	ac.StartEcho(echoPort)
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(filepath.Dir(file)), "deploy", "kube-proxy")
	dyn, err := dynamic.NewForConfig(ac.api.RESTConfig(ac.api.Token(apiserver.AdminUser)))
	if err != nil {
		t.Fatal(err)
	}
	objs := yamlObjects(t, filepath.Join(dir, "kubeadm.yaml"))
	for _, o := range objs {
		waitFor(t, "kubeadm's kube-proxy objects to apply", func() (bool, string) {
			err := applyUnstructured(dyn, o)
			return err == nil, errString(err)
		})
	}
	var before appsv1.DaemonSet
	var cm v1.ConfigMap
	decodeKind(t, objs, "DaemonSet", &before)
	decodeKind(t, objs, "ConfigMap", &cm)

	patch, err := os.ReadFile(filepath.Join(dir, "swap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	patchJSON, err := yaml.YAMLToJSON(patch)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	after, err := ac.client.AppsV1().DaemonSets(deployNamespace).Patch(ctx, before.Name, types.StrategicMergePatchType, patchJSON, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("patching the DaemonSet with swap.yaml: %v", err)
	}
	expectOnlyImageAndCommandChanged(t, before, *after)

	container := after.Spec.Template.Spec.Containers[0]
	mount := container.VolumeMounts[slices.IndexFunc(container.VolumeMounts, func(m v1.VolumeMount) bool { return m.Name == "kube-proxy" })]
	files := t.TempDir()
	kubeconfig := deployedKubeconfig(t, ac, cm.Data["kubeconfig.conf"], "kube-proxy")
	data, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"kubeconfig.conf": string(data), "config.conf": cm.Data["config.conf"]} {
		content = strings.ReplaceAll(content, mount.MountPath+"/", files+"/")
		if err := os.WriteFile(filepath.Join(files, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var args []string
	for _, a := range container.Command[1:] {
		a = strings.ReplaceAll(a, "$(NODE_NAME)", nodeName)
		args = append(args, strings.ReplaceAll(a, mount.MountPath+"/", files+"/"))
	}
	if binary := filepath.Base(container.Command[0]); binary != "iptables-proxy" {
		t.Fatalf("swap.yaml runs %s, want iptables-proxy (kubeadm's mode \"\" is iptables)", binary)
	}

	ac.put(apiService("web", 61))
	ac.put(slice("web", false, v1.ProtocolTCP, ready(ac.Cluster, ac.Pods[0])))
	p := &proxy{t: t, backend: "iptables", node: ac.Node, dir: t.TempDir(), log: &logBuffer{}, nodeObj: nodeObject()}
	cmd := ac.Node.Command(context.Background(), proxyBinary(t, "iptables"), args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if p.proc, err = ac.Node.Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("swapped-in proxy (%v) output:\n%s", cmd.Args, p.log.String())
		}
	})
	p.waitSyncs(1)
	eventuallyReaches(t, ac.Clients[0], at(serviceIP(false, 61), 80), ac.Pods[0])
	if strings.Contains(p.log.String(), "forbidden") {
		t.Errorf("the proxy was refused something under kube-proxy's role:\n%s", p.log.String())
	}
	stopProxy(t, p)
}

// expectOnlyImageAndCommandChanged checks that the patched DaemonSet is the
// one before but for its container's image and command.
func expectOnlyImageAndCommandChanged(t *testing.T, before, after appsv1.DaemonSet) {
	t.Helper()
	b, a := before.Spec.Template.Spec, after.Spec.Template.Spec
	if len(a.Containers) != 1 || a.Containers[0].Image == b.Containers[0].Image || slices.Equal(a.Containers[0].Command, b.Containers[0].Command) {
		t.Fatalf("patched containers %+v: want one, with a new image and command", a.Containers)
	}
	bc, ac := b.Containers[0], a.Containers[0]
	if a.ServiceAccountName != b.ServiceAccountName || len(a.Volumes) != len(b.Volumes) || !slices.Equal(volumeNames(ac.VolumeMounts), volumeNames(bc.VolumeMounts)) ||
		ac.SecurityContext == nil || bc.SecurityContext == nil || *ac.SecurityContext.Privileged != *bc.SecurityContext.Privileged {
		t.Errorf("the patch changed more than the image and command: before %+v, after %+v", b, a)
	}
}

func volumeNames(ms []v1.VolumeMount) []string {
	var names []string
	for _, m := range ms {
		names = append(names, m.Name+":"+m.MountPath)
	}
	return names
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
