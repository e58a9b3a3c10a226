package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/internal/testkit/warnings"
	"github.com/svcproxy/svcproxy/ruleset"
)

// fakeBackend records what it syncs.
type fakeBackend struct {
	family v1.IPFamily
	mu     sync.Mutex
	synced []*ruleset.Ruleset
	fails  int
	failed bool
	clean  int
}

// fakeRender writes one line per Service, and warns about each Service
// port it does not write: those of Services called "unrenderable".
func fakeRender(w io.Writer, rs *ruleset.Ruleset, _ *Options) ([]svcproxy.Warning, error) {
	var warnings []svcproxy.Warning
	for _, s := range rs.Services() {
		if s.Name.Name == "unrenderable" {
			warnings = append(warnings, svcproxy.Warning{Kind: "Service", Namespace: s.Name.Namespace, Name: s.Name.Name, Reason: "not rendered"})
			continue
		}
		if _, err := fmt.Fprintf(w, "%s %s %s %s\n", rs.Config().Family, s.Name, s.ClusterIP, s.Internal); err != nil {
			return nil, err
		}
	}
	return warnings, nil
}

// Sync reports the first sync, and the one after a failure, as full.
func (b *fakeBackend) Sync(_ context.Context, rs *ruleset.Ruleset) (svcproxy.SyncResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fails > 0 {
		b.fails--
		b.failed = true
		return svcproxy.SyncResult{}, errors.New("injected failure")
	}
	full := len(b.synced) == 0 || b.failed
	b.failed = false
	b.synced = append(b.synced, rs)
	return svcproxy.SyncResult{Full: full}, nil
}

func (b *fakeBackend) CheckState(context.Context) (svcproxy.Drift, error) {
	return svcproxy.Drift{}, nil
}

// RequestFullSync makes the next successful Sync report a full sync.
func (b *fakeBackend) RequestFullSync() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failed = true
}

func (b *fakeBackend) Cleanup(context.Context) error {
	b.clean++
	return nil
}

func (b *fakeBackend) Close() error { return nil }

func fakeMode(backends map[v1.IPFamily]*fakeBackend) Mode {
	return Mode{Name: "fake", Render: fakeRender, NewBackend: func(f v1.IPFamily, _ *Options) (engine.Backend, error) {
		b := &fakeBackend{family: f}
		backends[f] = b
		return b, nil
	}}
}

const goodService = `apiVersion: v1
kind: Service
metadata: {namespace: ns, name: good}
spec:
  clusterIP: 198.19.0.1
  ports: [{name: http, port: 80}]
`

const badService = `apiVersion: v1
kind: Service
metadata: {namespace: ns, name: bad}
spec:
  clusterIP: 198.19.0.999
  ports: [{name: http, port: 80}]
`

func writeManifests(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestDryRunPrintsWhatWouldBeApplied(t *testing.T) {
	backends := map[v1.IPFamily]*fakeBackend{}
	dir := writeManifests(t, map[string]string{"svc.yaml": goodService})
	var out, errs bytes.Buffer
	code := Run(fakeMode(backends), []string{"--manifests", dir, "--node-name", "n1", "--ip-family", "ipv4", "--dry-run"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errs.String())
	}
	if want := "IPv4 ns/good:http 198.19.0.1 reject\n"; out.String() != want {
		t.Errorf("dry run printed %q, want %q", out.String(), want)
	}
	if len(backends) != 0 {
		t.Error("a dry run made an executor")
	}
}

// A dry run logs the render's warnings on stderr, as a sync would, and
// prints the rules alone on stdout.
func TestDryRunWarnsOnStderr(t *testing.T) {
	unrenderable := strings.ReplaceAll(goodService, "name: good", "name: unrenderable")
	unrenderable = strings.ReplaceAll(unrenderable, "198.19.0.1", "198.19.0.2")
	dir := writeManifests(t, map[string]string{"good.yaml": goodService, "unrenderable.yaml": unrenderable})
	var out, errs bytes.Buffer
	code := Run(fakeMode(map[v1.IPFamily]*fakeBackend{}), []string{"--manifests", dir, "--node-name", "n1", "--ip-family", "ipv4", "--dry-run"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errs.String())
	}
	if want := "IPv4 ns/good:http 198.19.0.1 reject\n"; out.String() != want {
		t.Errorf("dry run printed %q on stdout, want %q", out.String(), want)
	}
	if want := `level=WARN msg="Service ns/unrenderable: not rendered"`; !strings.Contains(errs.String(), want) {
		t.Errorf("stderr %q does not log %q", errs.String(), want)
	}
}

func TestBrokenFileIsOneLineErrorAndNothingApplied(t *testing.T) {
	backends := map[v1.IPFamily]*fakeBackend{}
	broken := goodService + "---\napiVersion: v1\nkind: Service\nmetadata: {namespace: ns, name: web}\nspec:\n  ports: [{port: eighty}]\n"
	dir := writeManifests(t, map[string]string{"services.yaml": broken})
	var out, errs bytes.Buffer
	code := Run(fakeMode(backends), []string{"--manifests", dir, "--node-name", "n1", "--once"}, &out, &errs)
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	msg := errs.String()
	if !strings.HasPrefix(msg, "bad manifests: services.yaml: document 2: Service ns/web: ") || strings.Count(msg, "\n") != 1 {
		t.Errorf("stderr %q is not one line naming file and object", msg)
	}
	if len(backends) != 0 {
		t.Error("a backend was made for a broken input")
	}
}

func TestBadObjectIsSkippedOthersSynced(t *testing.T) {
	backends := map[v1.IPFamily]*fakeBackend{}
	dir := writeManifests(t, map[string]string{"a.yaml": badService, "b.yaml": goodService})
	var out, errs bytes.Buffer
	code := Run(fakeMode(backends), []string{"--manifests", dir, "--node-name", "n1", "--ip-family", "ipv4", "--once"}, &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errs.String())
	}
	if !strings.Contains(errs.String(), `Service ns/bad: invalid cluster IP \"198.19.0.999\"`) {
		t.Errorf("no warning naming the bad Service; stderr: %s", errs.String())
	}
	synced := backends[v1.IPv4Protocol].synced
	if len(synced) != 1 || len(synced[0].Services()) != 1 || synced[0].Services()[0].Name.Name != "good" {
		t.Errorf("synced %v, want exactly ns/good", synced)
	}
}

func TestBadFlagsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"--node-name", "n"},
		{"--manifests", "x", "--kubeconfig", "y"},
		{"--manifests", "x", "--ip-family", "ipv5"},
		{"--manifests", "x", "--cluster-cidr", "198.18.0.0/33"},
		{"--manifests", "x", "--node-ip", "nope"},
		{"--manifests", "x", "--min-sync-period", "1m", "--sync-period", "1s"},
		{"--manifests", "x", "--once", "--dry-run"},
		{"--no-such-flag"},
	} {
		var out, errs bytes.Buffer
		if code := Run(fakeMode(map[v1.IPFamily]*fakeBackend{}), args, &out, &errs); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// testProxy is an IPv4 proxy for node n1 whose engine syncs to backend.
func testProxy(t *testing.T, backend *fakeBackend) (*proxy, *engine.Engine) {
	t.Helper()
	p := &proxy{
		mode:    Mode{Name: "fake", Render: fakeRender},
		opts:    &Options{NodeName: "n1", SyncPeriod: time.Minute},
		log:     discardLogger(),
		metrics: newMetrics(),
	}
	p.useState(ipv4State())
	eng, err := engine.New(p.engineConfig(map[v1.IPFamily]engine.Backend{v1.IPv4Protocol: backend}))
	if err != nil {
		t.Fatal(err)
	}
	p.eng.Store(eng)
	return p, eng
}

// TestFailedSyncLosesNoChange: the engine's retry of a failed sync applies
// the proxy's state as it is then.
func TestFailedSyncLosesNoChange(t *testing.T) {
	must := warnings.Must(t)
	backend := &fakeBackend{family: v1.IPv4Protocol, fails: 1}
	p, eng := testProxy(t, backend)
	must.None(p.state.UpdateService(service("a", "198.19.0.1")))
	if err := eng.Sync(context.Background()); err == nil {
		t.Fatal("the injected failure was not reported")
	}
	must.None(p.state.UpdateService(service("b", "198.19.0.2")))
	if err := eng.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range backend.synced[0].Services() {
		names = append(names, s.Name.Name)
	}
	if strings.Join(names, ",") != "a,b" {
		t.Errorf("after a failed sync, the next synced %v, want a,b", names)
	}
}

// TestSyncDurationFullOrPartial: kube-proxy's full and partial sync
// histograms, served from the proxy's registry, count the syncs that the
// backends report as full and as incremental.
func TestSyncDurationFullOrPartial(t *testing.T) {
	must := warnings.Must(t)
	backend := &fakeBackend{family: v1.IPv4Protocol}
	p, eng := testProxy(t, backend)
	count := func(name string) uint64 {
		t.Helper()
		families, err := p.metrics.registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == name {
				return f.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	for i, want := range []struct{ full, partial uint64 }{{1, 0}, {1, 1}, {1, 2}} {
		must.None(p.state.UpdateService(service(fmt.Sprint("s", i), fmt.Sprint("198.19.0.", i+1))))
		if err := eng.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		full, partial := count("kubeproxy_sync_full_proxy_rules_duration_seconds"), count("kubeproxy_sync_partial_proxy_rules_duration_seconds")
		if full != want.full || partial != want.partial || count("kubeproxy_sync_proxy_rules_duration_seconds") != full+partial {
			t.Errorf("after sync %d: %d full, %d partial, want %d and %d", i+1, full, partial, want.full, want.partial)
		}
	}
}

func service(name, ip string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       v1.ServiceSpec{ClusterIP: ip, Ports: []v1.ServicePort{{Name: "p", Port: 80}}},
	}
}
