package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// clientFromKubeconfig makes a clientset from a kubeconfig file whose
// requests reach report.
func clientFromKubeconfig(path string, report *reachability) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	cfg.UserAgent = "svcproxy-reference-proxy"
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return reachabilityTransport{rt, report} })
	return kubernetes.NewForConfig(cfg)
}

// reachability logs when the API server stops answering (once, when the
// first request fails to reach it) and when it answers again (once, with
// how long it was away), from the outcome of every request the client
// makes: informers list and watch again on their own, and each attempt
// tells. Only a request sent after the first failure can tell that the
// server is back: one sent before it may still be answered by a server
// that is shutting down.
type reachability struct {
	log *slog.Logger
	now func() time.Time

	mu sync.Mutex
	// lostAt is when the first request failed since the server last
	// answered; zero while it answers.
	lostAt time.Time
}

// failed records a request that did not reach the server.
func (r *reachability) failed(err error) {
	if errors.Is(err, context.Canceled) {
		return // the proxy is stopping
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lostAt.IsZero() {
		r.lostAt = r.now()
		r.log.Error("API server unreachable: watches lost; the rules stay as they are and are still checked and repaired", "err", err)
	}
}

// answered records a response of the server to a request sent at sent.
func (r *reachability) answered(sent time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.lostAt.IsZero() && !sent.Before(r.lostAt) {
		r.log.Info("API server reachable again: watches resume", "unreachableFor", r.now().Sub(r.lostAt).Round(time.Millisecond))
		r.lostAt = time.Time{}
	}
}

// reachabilityTransport reports the outcome of each request.
type reachabilityTransport struct {
	next   http.RoundTripper
	report *reachability
}

func (t reachabilityTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := t.report.now()
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		t.report.failed(err)
	} else {
		t.report.answered(sent)
	}
	return resp, err
}
