package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	// fullRequests counts the calls of RequestFullSync.
	fullRequests int
	// missing is what CheckState reports, until a full sync repairs it.
	missing string
}

// fakeRender writes one line per Service.
func fakeRender(w io.Writer, rs *ruleset.Ruleset) error {
	for _, s := range rs.Services() {
		fmt.Fprintf(w, "%s %s %s %s\n", rs.Config().Family, s.Name, s.ClusterIP, s.Internal)
	}
	return nil
}

// Sync reports the first sync, and the one after a failure, as full.
func (b *fakeBackend) Sync(_ context.Context, rs *ruleset.Ruleset) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fails > 0 {
		b.fails--
		b.failed = true
		return false, errors.New("injected failure")
	}
	full := len(b.synced) == 0 || b.failed
	b.failed = false
	b.synced = append(b.synced, rs)
	if full {
		b.missing = ""
	}
	return full, nil
}

// CheckState reports b.missing.
func (b *fakeBackend) CheckState(context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.missing, nil
}

// RequestFullSync makes the next successful Sync report a full sync.
func (b *fakeBackend) RequestFullSync() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fullRequests++
	b.failed = true
}

func (b *fakeBackend) Cleanup(context.Context) error {
	b.clean++
	return nil
}

func fakeMode(backends map[v1.IPFamily]*fakeBackend) Mode {
	return Mode{Name: "fake", Render: fakeRender, NewExecutor: func(f v1.IPFamily) (Executor, error) {
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

// testProxy is an IPv4 proxy for node n1 that syncs to backend.
func testProxy(backend *fakeBackend) *proxy {
	return &proxy{
		mode:      Mode{Name: "fake", Render: fakeRender},
		opts:      &Options{NodeName: "n1", SyncPeriod: time.Minute},
		log:       discardLogger(),
		metrics:   newMetrics(),
		state:     ipv4State(),
		families:  []v1.IPFamily{v1.IPv4Protocol},
		executors: map[v1.IPFamily]Executor{v1.IPv4Protocol: backend},
	}
}

func TestFailedSyncLosesNoChange(t *testing.T) {
	backend := &fakeBackend{family: v1.IPv4Protocol, fails: 1}
	p := testProxy(backend)
	p.state.UpdateService(service("a", "198.19.0.1"))
	if err := p.sync(context.Background(), false); err == nil {
		t.Fatal("the injected failure was not reported")
	}
	p.state.UpdateService(service("b", "198.19.0.2"))
	if err := p.sync(context.Background(), false); err != nil {
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
// histograms count the syncs that the executors report as full and as
// incremental.
func TestSyncDurationFullOrPartial(t *testing.T) {
	backend := &fakeBackend{family: v1.IPv4Protocol}
	p := testProxy(backend)
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
		p.state.UpdateService(service(fmt.Sprint("s", i), fmt.Sprint("198.19.0.", i+1)))
		if err := p.sync(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		full, partial := count("kubeproxy_sync_full_proxy_rules_duration_seconds"), count("kubeproxy_sync_partial_proxy_rules_duration_seconds")
		if full != want.full || partial != want.partial || count("kubeproxy_sync_proxy_rules_duration_seconds") != full+partial {
			t.Errorf("after sync %d: %d full, %d partial, want %d and %d", i+1, full, partial, want.full, want.partial)
		}
	}
}

func TestHealthzFollowsLastSync(t *testing.T) {
	p := &proxy{opts: &Options{SyncPeriod: time.Second}}
	for _, tt := range []struct {
		age     time.Duration
		failing bool
		want    int
	}{
		{0, false, 200},
		{1900 * time.Millisecond, false, 200},
		{2100 * time.Millisecond, false, 503},
		{0, true, 503},
	} {
		p.lastSuccess.Store(time.Now().Add(-tt.age).UnixNano())
		p.failing.Store(tt.failing)
		rec := httptest.NewRecorder()
		p.healthz(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if rec.Code != tt.want {
			t.Errorf("last success %v ago, last sync failed %v: %d, want %d", tt.age, tt.failing, rec.Code, tt.want)
		}
	}
}

// TestPeriodicSyncRepairsAndFailureIsUnhealthy: a periodic sync asks an
// executor for a full sync when its check finds rules missing, and every
// executor once per fullSyncPeriod, and counts both; /healthz is 503 from a
// failed sync until the next successful one.
func TestPeriodicSyncRepairsAndFailureIsUnhealthy(t *testing.T) {
	backend := &fakeBackend{family: v1.IPv4Protocol}
	p := testProxy(backend)
	p.lastPeriodicFull = time.Now()
	p.state.UpdateService(service("a", "198.19.0.1"))
	health := func() int {
		rec := httptest.NewRecorder()
		p.healthz(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code
	}
	type step struct {
		periodic, fail   bool
		missing          string
		wantFullRequests int
		wantHealth       int
	}
	for i, st := range []step{
		{periodic: false, wantFullRequests: 0, wantHealth: 200},
		{periodic: true, wantFullRequests: 0, wantHealth: 200}, // nothing missing
		{periodic: true, missing: "chain services", wantFullRequests: 1, wantHealth: 200},
		{periodic: true, missing: "table kube-proxy", fail: true, wantFullRequests: 2, wantHealth: 503},
		{periodic: false, fail: true, wantFullRequests: 2, wantHealth: 503},
		{periodic: false, wantFullRequests: 2, wantHealth: 200},
	} {
		backend.missing = st.missing
		if st.fail {
			backend.fails = 1
		}
		if err := p.sync(context.Background(), st.periodic); (err != nil) != st.fail {
			t.Fatalf("step %d: sync error %v, want failure %v", i, err, st.fail)
		}
		if backend.fullRequests != st.wantFullRequests || health() != st.wantHealth {
			t.Errorf("step %d: %d full sync requests, /healthz %d; want %d and %d",
				i, backend.fullRequests, health(), st.wantFullRequests, st.wantHealth)
		}
	}
	if got := counterValue(t, p.metrics, "svcproxy_sync_drift_repairs_total"); got != 2 {
		t.Errorf("svcproxy_sync_drift_repairs_total = %v, want 2", got)
	}
	p.lastPeriodicFull = time.Now().Add(-fullSyncPeriod)
	if err := p.sync(context.Background(), true); err != nil || backend.fullRequests != 3 {
		t.Errorf("periodic sync a full sync period later: %v, %d full sync requests, want 3", err, backend.fullRequests)
	}
	if got := counterValue(t, p.metrics, "svcproxy_sync_periodic_full_total"); got != 1 {
		t.Errorf("svcproxy_sync_periodic_full_total = %v, want 1", got)
	}
}

// counterValue is the value of the counter called name in m.
func counterValue(t *testing.T, m *metrics, name string) float64 {
	t.Helper()
	families, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestHealthCheckNodePortAnswers(t *testing.T) {
	h := newHealthServers(discardLogger(), false)
	h.servers[30256] = &healthServer{local: 2}
	h.servers[30257] = &healthServer{local: 0}
	for port, want := range map[uint16]int{30256: 200, 30257: 503} {
		rec := httptest.NewRecorder()
		h.handler(port).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		var body struct{ LocalEndpoints int }
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if rec.Code != want || body.LocalEndpoints != h.servers[port].local {
			t.Errorf("port %d: %d %+v, want %d with %d local endpoints", port, rec.Code, body, want, h.servers[port].local)
		}
	}
}

func service(name, ip string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       v1.ServiceSpec{ClusterIP: ip, Ports: []v1.ServicePort{{Name: "p", Port: 80}}},
	}
}
