package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestServers checks /proxyMode, /metrics (kube-proxy's metric names) and
// /healthz on the addresses the flags give, and that "" turns a server off.
func TestServers(t *testing.T) {
	metricsAddr, healthzAddr := freeAddr(t), freeAddr(t)
	p, eng := testProxy(t, &fakeBackend{family: v1.IPv4Protocol})
	p.mode.Name = "nftables"
	p.opts.MetricsAddress, p.opts.HealthzAddress = metricsAddr, healthzAddr
	if err := eng.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	servers, err := p.startServers(eng)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()

	if code, body := get(t, "http://"+metricsAddr+"/proxyMode"); code != 200 || body != "nftables" {
		t.Errorf("/proxyMode: %d %q, want 200 nftables", code, body)
	}
	code, body := get(t, "http://"+metricsAddr+"/metrics")
	if code != 200 {
		t.Errorf("/metrics: %d", code)
	}
	for _, name := range []string{
		`kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",`,
		`kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{ip_family="IPv4",`,
		`kubeproxy_sync_partial_proxy_rules_duration_seconds_bucket{ip_family="IPv4",`,
		`kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 1.`,
		"kubeproxy_sync_proxy_rules_failures_total 0",
		`svcproxy_sync_drift_repairs_total{family="IPv4",kind="chain"} 0`,
		"svcproxy_sync_periodic_full_total 0",
		"svcproxy_manifest_reloads_total 0",
		"svcproxy_manifest_errors_total 0",
		"kubeproxy_sync_proxy_rules_endpoint_changes_pending",
		"kubeproxy_sync_proxy_rules_service_changes_pending",
		"kubeproxy_sync_proxy_rules_endpoint_changes_total 0",
		"kubeproxy_sync_proxy_rules_service_changes_total 0",
		`kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",`,
	} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if code, _ := get(t, "http://"+healthzAddr+"/healthz"); code != 200 {
		t.Errorf("/healthz after a recent sync: %d, want 200", code)
	}

	off := &proxy{mode: Mode{Name: "x"}, opts: &Options{}, metrics: newMetrics()}
	servers, err = off.startServers(eng)
	if err != nil || len(servers) != 0 {
		t.Errorf("with both addresses empty: %d servers, error %v; want none", len(servers), err)
	}
}

// TestProfiling: with Options.Profiling the metrics server serves Go's
// profiles under kube-proxy's routes; without it, not.
func TestProfiling(t *testing.T) {
	for _, on := range []bool{true, false} {
		addr := freeAddr(t)
		p, eng := testProxy(t, &fakeBackend{family: v1.IPv4Protocol})
		p.opts.MetricsAddress, p.opts.HealthzAddress, p.opts.Profiling = addr, "", on
		servers, err := p.startServers(eng)
		if err != nil {
			t.Fatal(err)
		}
		code, body := get(t, "http://"+addr+"/debug/pprof/")
		symbolCode, _ := get(t, "http://"+addr+"/debug/pprof/symbol")
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Get("http://" + addr + "/debug/pprof")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, s := range servers {
			s.Close()
		}
		if on {
			if code != 200 || !strings.Contains(body, "goroutine") || symbolCode != 200 {
				t.Errorf("profiling on: /debug/pprof/ %d (goroutine listed: %v), /debug/pprof/symbol %d; want 200s", code, strings.Contains(body, "goroutine"), symbolCode)
			}
			if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/debug/pprof/" {
				t.Errorf("profiling on: /debug/pprof answers %d to %q, want 302 to /debug/pprof/", resp.StatusCode, resp.Header.Get("Location"))
			}
		} else if code != 404 || symbolCode != 404 || resp.StatusCode != 404 {
			t.Errorf("profiling off: /debug/pprof/ %d, /debug/pprof/symbol %d, /debug/pprof %d; want 404s", code, symbolCode, resp.StatusCode)
		}
	}
}
