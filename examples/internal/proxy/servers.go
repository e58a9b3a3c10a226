package proxy

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// startServers starts the metrics and healthz servers that are not turned
// off.
func (p *proxy) startServers() ([]*http.Server, error) {
	var servers []*http.Server
	start := func(addr string, h http.Handler) error {
		if addr == "" {
			return nil
		}
		ln, err := listen(addr)
		if err != nil {
			return err
		}
		s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, s)
		go s.Serve(ln)
		return nil
	}
	metrics := http.NewServeMux()
	metrics.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, p.mode.Name)
	})
	metrics.Handle("/metrics", promhttp.HandlerFor(p.metrics.registry, promhttp.HandlerOpts{}))
	healthz := http.NewServeMux()
	healthz.HandleFunc("/healthz", p.healthz)
	healthz.HandleFunc("/livez", p.healthz)
	if err := start(p.opts.MetricsAddress, metrics); err != nil {
		return nil, err
	}
	if err := start(p.opts.HealthzAddress, healthz); err != nil {
		for _, s := range servers {
			s.Close()
		}
		return nil, err
	}
	return servers, nil
}

// healthz answers 200 while the last successful sync is younger than twice
// the sync period, 503 after.
func (p *proxy) healthz(w http.ResponseWriter, _ *http.Request) {
	last := time.Unix(0, p.lastSuccess.Load())
	now := time.Now()
	healthy := now.Sub(last) < 2*p.opts.SyncPeriod
	w.Header().Set("Content-Type", "application/json")
	if !healthy {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(map[string]any{
		"lastUpdated": last.UTC().Format(time.RFC3339Nano),
		"currentTime": now.UTC().Format(time.RFC3339Nano),
		"healthy":     healthy,
	})
}

// fingerprint hashes the names, sizes and contents of the manifests, to
// notice changes however the file was written.
func fingerprint(path string) ([32]byte, error) {
	h := sha256.New()
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != path {
				return filepath.SkipDir
			}
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(data))
		h.Write(data)
		return nil
	})
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, err
}
