//go:build linux

package apiserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// dial connects from inside the servers' namespace, so that the test
// process, which lives in the host namespace, reaches the servers.
func (s *Server) dial(ctx context.Context, _, address string) (net.Conn, error) {
	remote, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, fmt.Errorf("dialling %s: %w", address, err)
	}
	timeout := 10 * time.Second
	if deadline, ok := ctx.Deadline(); ok {
		timeout = time.Until(deadline)
	}
	return s.ns.Dial("tcp", netip.AddrPort{}, remote, timeout)
}

// RESTConfig is a client configuration for the bearer token, dialling from
// inside the servers' namespace.
func (s *Server) RESTConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            "https://" + s.Addr.String(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.pki.caCert},
		Dial:            s.dial,
		UserAgent:       "svcproxy-e2e",
		QPS:             200,
		Burst:           400,
	}
}

// Client is a clientset authenticated as AdminUser.
func (s *Server) Client() kubernetes.Interface {
	s.t.Helper()
	c, err := kubernetes.NewForConfig(s.RESTConfig(s.Token(AdminUser)))
	if err != nil {
		s.t.Fatalf("apiserver: client: %v", err)
	}
	return c
}

// Kubeconfig writes a kubeconfig for the bearer token (for a process inside
// the servers' namespace, or one that can reach Addr) and returns its path.
func (s *Server) Kubeconfig(token string) string {
	s.t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: "https://" + s.Addr.String(), CertificateAuthorityData: s.pki.caCert}
	cfg.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	cfg.CurrentContext = "test"
	f, err := os.CreateTemp(s.dir, "kubeconfig-*")
	if err != nil {
		s.t.Fatalf("apiserver: %v", err)
	}
	f.Close()
	if err := clientcmd.WriteToFile(*cfg, f.Name()); err != nil {
		s.t.Fatalf("apiserver: kubeconfig: %v", err)
	}
	return f.Name()
}

// httpClient is a plain HTTP client that dials from inside the servers'
// namespace and trusts the test CA.
func (s *Server) httpClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.pki.caCert)
	return &http.Client{Transport: &http.Transport{
		DialContext:     s.dial,
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
}

// apiserverReady is nil once /readyz answers 200.
func (s *Server) apiserverReady(ctx context.Context) error {
	body, err := s.call(ctx, http.MethodGet, "https://"+s.Addr.String()+"/readyz", s.Token(AdminUser), nil)
	if err != nil {
		return err
	}
	if strings.TrimSpace(body) != "ok" {
		return fmt.Errorf("readyz: %q", body)
	}
	return nil
}

// etcdHealthy is nil once etcd's /health says it is.
func (s *Server) etcdHealthy(ctx context.Context) error {
	body, err := s.call(ctx, http.MethodGet, etcdClientURL+"/health", "", nil)
	if err != nil {
		return err
	}
	var health struct{ Health string }
	if err := json.Unmarshal([]byte(body), &health); err != nil || health.Health != "true" {
		return fmt.Errorf("etcd health: %q", body)
	}
	return nil
}

// CompactEtcd compacts etcd's history up to its current revision, so that
// no watch can resume from an older resource version, and returns that
// revision.
func (s *Server) CompactEtcd() int64 {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A range over one key answers with the store's current revision.
	body, err := s.call(ctx, http.MethodPost, etcdClientURL+"/v3/kv/range", "", map[string]any{"key": "AA=="})
	if err != nil {
		s.t.Fatalf("apiserver: etcd revision: %v", err)
	}
	var reply struct {
		Header struct {
			Revision int64 `json:"revision,string"`
		} `json:"header"`
	}
	if err := json.Unmarshal([]byte(body), &reply); err != nil || reply.Header.Revision == 0 {
		s.t.Fatalf("apiserver: etcd revision from %q: %v", body, err)
	}
	compaction := map[string]any{"revision": reply.Header.Revision, "physical": true}
	if _, err := s.call(ctx, http.MethodPost, etcdClientURL+"/v3/kv/compaction", "", compaction); err != nil {
		s.t.Fatalf("apiserver: etcd compaction at %d: %v", reply.Header.Revision, err)
	}
	return reply.Header.Revision
}

// call makes one request and returns the body of a 200 answer; any other
// status is an error.
func (s *Server) call(ctx context.Context, method, url, token string, payload any) (string, error) {
	var body io.Reader
	if payload != nil {
		data, err := json.Marshal(payload)
		if err != nil {
			return "", err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := s.httpClient()
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", method, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, data)
	}
	return string(data), nil
}

// logBuffer collects a process's output safely.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// tail is the last n lines written.
func (l *logBuffer) tail(n int) string {
	lines := strings.Split(strings.TrimRight(l.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// CACert is the PEM certificate of the CA that signed the API server's
// serving certificate.
func (s *Server) CACert() []byte { return s.pki.caCert }
