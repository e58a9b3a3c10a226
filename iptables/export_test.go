package iptables

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/servicemap"
)

// What the external tests (package iptables_test) use of the package's
// own test kit.

// FakeKernel is the package tests' fake of iptables-restore and
// iptables-save, an IPv4 one.
type FakeKernel = fakeKernel

func NewFakeKernel(t *testing.T) *FakeKernel { return newFakeKernel(t, v1.IPv4Protocol) }

// Web is the Service port of WebRuleset.
var Web = servicemap.PortName{Namespace: "ns1", Name: "web", Port: "p80", Protocol: v1.ProtocolTCP}

// WebRuleset is the Ruleset of one Service, ns1/web, with two endpoints.
func WebRuleset(t *testing.T) *ruleset.Ruleset {
	return build(t, testConfig(),
		service("ns1", "web", "198.19.0.10"),
		slice("ns1", "web", "web-1", 8080, v1.ProtocolTCP, readyEPs(2, false)...))
}

// FlushServiceChain flushes port's chain in k behind e's back (e's lock
// held, so that no command of e's is under way) and makes e's next deep
// check due.
func FlushServiceChain(e *Executor, k *FakeKernel, port servicemap.PortName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k.tables["nat"][e.names.ServiceChain(port)] = nil
	e.deepDue = time.Time{}
}

// ServiceChainRules is the number of rules of port's chain in k.
func ServiceChainRules(e *Executor, k *FakeKernel, port servicemap.PortName) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(k.tables["nat"][e.names.ServiceChain(port)])
}
