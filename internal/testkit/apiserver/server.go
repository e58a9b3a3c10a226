//go:build linux

package apiserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

const (
	// Port is the API server's secure port.
	Port = 6443
	// etcdClientURL is where etcd serves its clients, on the loopback of
	// the servers' namespace.
	etcdClientURL = "http://127.0.0.1:2379"
	etcdPeerURL   = "http://127.0.0.1:2380"
	// AdminUser is in system:masters: allowed everything in every
	// authorization mode.
	AdminUser = "admin"
	// readyTimeout bounds the wait for a server to become ready.
	readyTimeout = 90 * time.Second
	// stopTimeout bounds the wait for a server to exit after SIGTERM, before
	// it is killed.
	stopTimeout = 20 * time.Second
)

// DefaultServiceCIDRs is the API server's --service-cluster-ip-range unless
// Options say otherwise: inside 198.19.0.0/16 and 2001:db8::/32.
const DefaultServiceCIDRs = "198.19.0.0/24,2001:db8:19::/112"

// Options change how Start runs the API server.
type Options struct {
	// Authorization is --authorization-mode; "AlwaysAllow" when empty.
	Authorization string
	// ServiceCIDRs is --service-cluster-ip-range; DefaultServiceCIDRs when
	// empty.
	ServiceCIDRs string
	// Users are the static-token users besides AdminUser, in no group.
	Users []string
	// AuditUsers are the users whose every request is written to the audit
	// log (see Server.Audit), at the Metadata level.
	AuditUsers []string
	// AllowPrivileged is --allow-privileged, which kubeadm's API servers
	// set: kube-proxy's DaemonSet runs privileged.
	AllowPrivileged bool
}

// Server is an etcd and a kube-apiserver that Start runs in a test's network
// namespace. Everything it started is stopped, by PID, when the test ends, on
// failure too.
type Server struct {
	t    testing.TB
	ns   *netns.NS
	bins binaries
	opts Options
	dir  string
	pki  *pki
	// Addr is where the API server serves HTTPS, inside the namespace.
	Addr   netip.AddrPort
	tokens map[string]string // user → bearer token

	etcd, apiserver       *netns.Proc
	etcdLog, apiserverLog *logBuffer
}

// Start runs etcd (on the loopback of ns) and kube-apiserver (on addr, an
// address of ns) with a throwaway CA, a static token file, service-account
// keys and --endpoint-reconciler-type=none (the default/kubernetes Service
// has no endpoints), and waits until /readyz answers ok. It skips or fails t
// as findBinaries does when the binaries are missing.
func Start(t testing.TB, ns *netns.NS, addr netip.Addr, opts Options) *Server {
	t.Helper()
	s := &Server{t: t, ns: ns, bins: findBinaries(t), opts: opts, dir: t.TempDir(),
		Addr: netip.AddrPortFrom(addr, Port), tokens: map[string]string{},
		etcdLog: &logBuffer{}, apiserverLog: &logBuffer{}}
	if s.opts.Authorization == "" {
		s.opts.Authorization = "AlwaysAllow"
	}
	if s.opts.ServiceCIDRs == "" {
		s.opts.ServiceCIDRs = DefaultServiceCIDRs
	}
	t.Cleanup(s.cleanup)
	if err := s.writeFiles(); err != nil {
		t.Fatalf("apiserver: %v", err)
	}
	s.startEtcd()
	s.StartAPIServer()
	return s
}

// cleanup stops both servers, the API server first, and shows their logs'
// ends when the test failed.
func (s *Server) cleanup() {
	if s.t.Failed() {
		s.t.Logf("kube-apiserver log (end):\n%s", s.apiserverLog.tail(60))
		s.t.Logf("etcd log (end):\n%s", s.etcdLog.tail(30))
	}
	for _, p := range []*netns.Proc{s.apiserver, s.etcd} {
		if err := stop(p); err != nil {
			s.t.Errorf("apiserver cleanup: %v", err)
		}
	}
}

// writeFiles writes the certificates and keys, the token file and the audit
// policy into the Server's directory.
func (s *Server) writeFiles() error {
	serviceIP, err := firstServiceIP(s.opts.ServiceCIDRs)
	if err != nil {
		return err
	}
	if s.pki, err = newPKI(s.dir, s.Addr.Addr(), serviceIP); err != nil {
		return err
	}
	var lines []string
	for i, user := range append([]string{AdminUser}, s.opts.Users...) {
		token, err := randomToken()
		if err != nil {
			return err
		}
		s.tokens[user] = token
		group := ""
		if user == AdminUser {
			group = `,"system:masters"`
		}
		lines = append(lines, fmt.Sprintf("%s,%s,uid-%d%s", token, user, i, group))
	}
	if err := os.WriteFile(s.file("tokens.csv"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	return os.WriteFile(s.file("audit-policy.yaml"), []byte(auditPolicy(s.opts.AuditUsers)), 0o644)
}

// auditPolicy logs the metadata of every request of users, when the
// response starts (long-running requests: watches) and when it completes,
// and nothing else.
func auditPolicy(users []string) string {
	policy := "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n"
	if len(users) > 0 {
		policy += fmt.Sprintf("- level: Metadata\n  users: [%s]\n", strings.Join(users, ", "))
	}
	return policy + "- level: None\n"
}

// firstServiceIP is the first address of the first of cidrs, the address
// the API server gives the default/kubernetes Service.
func firstServiceIP(cidrs string) (netip.Addr, error) {
	first, _, _ := strings.Cut(cidrs, ",")
	p, err := netip.ParsePrefix(first)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("service CIDRs %q: %w", cidrs, err)
	}
	return p.Masked().Addr().Next(), nil
}

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func (s *Server) file(name string) string { return filepath.Join(s.dir, name) }

// Token is the bearer token of a static user (AdminUser or one of
// Options.Users).
func (s *Server) Token(user string) string {
	s.t.Helper()
	token, ok := s.tokens[user]
	if !ok {
		s.t.Fatalf("apiserver: no token for user %q", user)
	}
	return token
}

// startEtcd runs etcd with its data in the Server's directory and waits
// until it is healthy.
func (s *Server) startEtcd() {
	s.t.Helper()
	s.etcd = s.start(s.bins.etcd, s.etcdLog,
		"--name=test",
		"--data-dir="+s.file("etcd"),
		"--listen-client-urls="+etcdClientURL,
		"--advertise-client-urls="+etcdClientURL,
		"--listen-peer-urls="+etcdPeerURL,
		"--initial-advertise-peer-urls="+etcdPeerURL,
		"--initial-cluster=test="+etcdPeerURL,
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	s.waitReady("etcd", s.etcd, s.etcdLog, s.etcdHealthy)
}

// StartAPIServer runs kube-apiserver and waits until it is ready. Start
// calls it; a test calls it again after StopAPIServer.
func (s *Server) StartAPIServer() {
	s.t.Helper()
	args := []string{
		"--etcd-servers=" + etcdClientURL,
		"--bind-address=" + s.Addr.Addr().String(),
		"--advertise-address=" + s.Addr.Addr().String(),
		fmt.Sprintf("--secure-port=%d", s.Addr.Port()),
		"--cert-dir=" + s.file("certs"),
		"--tls-cert-file=" + s.pki.certFile,
		"--tls-private-key-file=" + s.pki.keyFile,
		"--client-ca-file=" + s.pki.caFile,
		"--token-auth-file=" + s.file("tokens.csv"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + s.pki.saPubFile,
		"--service-account-signing-key-file=" + s.pki.saKeyFile,
		"--service-cluster-ip-range=" + s.opts.ServiceCIDRs,
		"--endpoint-reconciler-type=none",
		"--authorization-mode=" + s.opts.Authorization,
		"--audit-policy-file=" + s.file("audit-policy.yaml"),
		"--audit-log-path=" + s.file("audit.log"),
		// On SIGTERM, end the watches within 2 s rather than wait for
		// them: the graceful shutdown then takes seconds, not a minute.
		"--shutdown-watch-termination-grace-period=2s",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		fmt.Sprintf("--allow-privileged=%t", s.opts.AllowPrivileged),
	}
	s.apiserver = s.start(s.bins.apiserver, s.apiserverLog, args...)
	s.waitReady("kube-apiserver", s.apiserver, s.apiserverLog, s.apiserverReady)
}

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 20 s) and
// waits until it has exited; etcd keeps running.
func (s *Server) StopAPIServer() {
	s.t.Helper()
	start := time.Now()
	if err := stop(s.apiserver); err != nil {
		s.t.Fatalf("apiserver: %v", err)
	}
	s.t.Logf("apiserver: kube-apiserver stopped after %v", time.Since(start).Round(time.Millisecond))
}

// start runs bin with args in the namespace, its output into log.
func (s *Server) start(bin string, log *logBuffer, args ...string) *netns.Proc {
	s.t.Helper()
	cmd := s.ns.Command(context.Background(), bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	proc, err := s.ns.Start(cmd)
	if err != nil {
		s.t.Fatalf("apiserver: starting %s: %v", filepath.Base(bin), err)
	}
	return proc
}

// waitReady polls ready every 200 ms, for at most readyTimeout, and fails
// the test if proc exits first or the time runs out.
func (s *Server) waitReady(name string, proc *netns.Proc, log *logBuffer, ready func(context.Context) error) {
	s.t.Helper()
	start := time.Now()
	deadline := start.Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := ready(ctx)
		cancel()
		if err == nil {
			s.t.Logf("apiserver: %s ready after %v", name, time.Since(start).Round(time.Millisecond))
			return
		}
		select {
		case <-proc.Done():
			s.t.Fatalf("apiserver: %s exited (%v) before it was ready:\n%s", name, proc.Err(), log.tail(40))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("apiserver: %s not ready within %v: %v\n%s", name, readyTimeout, err, log.tail(40))
		}
	}
}

// stop sends SIGTERM to the process, by its PID, and waits stopTimeout for
// it to exit before killing its process group. A nil or exited process is
// left alone.
func stop(p *netns.Proc) error {
	if p == nil {
		return nil
	}
	select {
	case <-p.Done():
		return nil
	default:
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return p.Stop()
	}
	select {
	case <-p.Done():
		return nil
	case <-time.After(stopTimeout):
		return p.Stop()
	}
}

// Audit returns the audit log so far: one JSON event per line, for the
// requests of Options.AuditUsers.
func (s *Server) Audit() string {
	s.t.Helper()
	data, err := os.ReadFile(s.file("audit.log"))
	if err != nil && !os.IsNotExist(err) {
		s.t.Fatalf("apiserver: %v", err)
	}
	return string(data)
}
