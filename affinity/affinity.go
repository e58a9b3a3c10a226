// Package affinity describes ClientIP session affinity as kube-proxy applies
// it: whether a Service port sticks each client to one endpoint, and for how
// long after the client's last packet.
//
// A Policy is a small value type. FromService reads it from a v1.Service with
// the API server's defaults and bounds, so that a Service that never passed
// validation (read from a file, say) cannot produce a timeout the kernel would
// reject. Seconds is the timeout every backend renders in its own
// syntax (iptables' `-m recent --seconds`, an nftables set's timeout).
//
// A data plane that keeps the client-to-endpoint table itself (in user
// space, or to mirror an eBPF map) can use Table, which applies a Policy's
// timeout, with the time passed in.
//
// The package is pure: no I/O, no clock, no globals.
//
// # Limitations
//
// Only ClientIP affinity exists in the Kubernetes API. The kernel backends
// keep the table in the kernel (iptables' recent module, an nftables set);
// Table is for the others.
package affinity

import (
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
)

const (
	// DefaultTimeoutSeconds is the affinity timeout when a ClientIP Service
	// does not set one (v1.DefaultClientIPServiceAffinitySeconds).
	DefaultTimeoutSeconds = 10800
	// MaxTimeoutSeconds is the largest timeout the API server accepts.
	MaxTimeoutSeconds = 86400
)

// Policy is the session affinity of one Service port. The zero value is
// "no affinity".
type Policy struct {
	timeoutSeconds int32
}

// ClientIP returns a ClientIP affinity policy with the given timeout. It
// reports an error when the timeout is outside 1..MaxTimeoutSeconds.
func ClientIP(timeoutSeconds int32) (Policy, error) {
	if timeoutSeconds < 1 || timeoutSeconds > MaxTimeoutSeconds {
		return Policy{}, fmt.Errorf("sessionAffinity timeout %d s is outside 1..%d", timeoutSeconds, MaxTimeoutSeconds)
	}
	return Policy{timeoutSeconds: timeoutSeconds}, nil
}

// FromService reads the session affinity of svc. Type None (or empty) gives the
// zero Policy; ClientIP without a timeout gets DefaultTimeoutSeconds. An
// unknown type or a timeout outside 1..MaxTimeoutSeconds is an error: the API
// server would have rejected the Service.
func FromService(svc *v1.Service) (Policy, error) {
	if svc == nil {
		return Policy{}, nil
	}
	switch svc.Spec.SessionAffinity {
	case "", v1.ServiceAffinityNone:
		return Policy{}, nil
	case v1.ServiceAffinityClientIP:
		timeout := int32(DefaultTimeoutSeconds)
		if cfg := svc.Spec.SessionAffinityConfig; cfg != nil && cfg.ClientIP != nil && cfg.ClientIP.TimeoutSeconds != nil {
			timeout = *cfg.ClientIP.TimeoutSeconds
		}
		return ClientIP(timeout)
	default:
		return Policy{}, fmt.Errorf("unknown sessionAffinity %q", svc.Spec.SessionAffinity)
	}
}

// Enabled reports whether clients stick to one endpoint.
func (p Policy) Enabled() bool { return p.timeoutSeconds > 0 }

// Seconds is the affinity timeout in seconds, or 0 when affinity is off. It is
// the value of iptables' `-m recent --rcheck --seconds`.
func (p Policy) Seconds() int32 { return p.timeoutSeconds }

// String is "None" or "ClientIP(<timeout>s)".
func (p Policy) String() string {
	if !p.Enabled() {
		return "None"
	}
	return "ClientIP(" + strconv.Itoa(int(p.timeoutSeconds)) + "s)"
}
