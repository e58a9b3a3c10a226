package conntrack

import (
	"fmt"
	"time"
)

// Sysctl names, relative to /proc/sys.
const (
	SysctlMax                   = "net/netfilter/nf_conntrack_max"
	SysctlBuckets               = "net/netfilter/nf_conntrack_buckets"
	SysctlCount                 = "net/netfilter/nf_conntrack_count"
	SysctlTCPEstablishedTimeout = "net/netfilter/nf_conntrack_tcp_timeout_established"
	SysctlTCPCloseWaitTimeout   = "net/netfilter/nf_conntrack_tcp_timeout_close_wait"
	SysctlTCPBeLiberal          = "net/netfilter/nf_conntrack_tcp_be_liberal"
	SysctlUDPTimeout            = "net/netfilter/nf_conntrack_udp_timeout"
	SysctlUDPStreamTimeout      = "net/netfilter/nf_conntrack_udp_timeout_stream"
)

// kube-proxy's defaults.
const (
	DefaultMaxPerCore            = 32768
	DefaultMin                   = 131072
	DefaultTCPEstablishedTimeout = 24 * time.Hour
	DefaultTCPCloseWaitTimeout   = time.Hour
)

// Sizing is the conntrack table size and timeouts a proxy wants, as
// kube-proxy's conntrack configuration has them. The zero value leaves
// everything as it is; DefaultSizing is kube-proxy's default.
type Sizing struct {
	// MaxPerCore is the number of entries per CPU; the table maximum is
	// max(MaxPerCore × CPUs, Min). 0 leaves the maximum and the hash size
	// alone.
	MaxPerCore int
	Min        int
	// The timeouts, in whole seconds; 0 leaves a timeout as it is.
	TCPEstablishedTimeout time.Duration
	TCPCloseWaitTimeout   time.Duration
	UDPTimeout            time.Duration
	UDPStreamTimeout      time.Duration
	// TCPBeLiberal sets nf_conntrack_tcp_be_liberal to 1 (false leaves it).
	TCPBeLiberal bool
}

// DefaultSizing is kube-proxy's default: 32768 entries per CPU, at least
// 131072; TCP established 24h and close-wait 1h; UDP left alone.
func DefaultSizing() Sizing {
	return Sizing{
		MaxPerCore:            DefaultMaxPerCore,
		Min:                   DefaultMin,
		TCPEstablishedTimeout: DefaultTCPEstablishedTimeout,
		TCPCloseWaitTimeout:   DefaultTCPCloseWaitTimeout,
	}
}

// Setting is one value to write to a sysctl.
type Setting struct {
	// Name is the sysctl's path relative to /proc/sys,
	// "net/netfilter/nf_conntrack_max".
	Name  string
	Value int
	// AtLeast makes Value a floor: a larger current value is left alone.
	AtLeast bool
}

func (s Setting) String() string {
	if s.AtLeast {
		return fmt.Sprintf("%s>=%d", s.Name, s.Value)
	}
	return fmt.Sprintf("%s=%d", s.Name, s.Value)
}

// Max is the table maximum for a machine with cpus CPUs, or 0 when
// MaxPerCore is 0 (leave it).
func (s Sizing) Max(cpus int) int {
	if s.MaxPerCore <= 0 {
		return 0
	}
	return max(s.MaxPerCore*max(cpus, 1), s.Min)
}

// Validate reports the first thing wrong with s.
func (s Sizing) Validate() error {
	switch {
	case s.MaxPerCore < 0:
		return fmt.Errorf("conntrack: negative MaxPerCore %d", s.MaxPerCore)
	case s.Min < 0:
		return fmt.Errorf("conntrack: negative Min %d", s.Min)
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{
		{"TCPEstablishedTimeout", s.TCPEstablishedTimeout},
		{"TCPCloseWaitTimeout", s.TCPCloseWaitTimeout},
		{"UDPTimeout", s.UDPTimeout},
		{"UDPStreamTimeout", s.UDPStreamTimeout},
	} {
		if t.d < 0 || (t.d > 0 && t.d < time.Second) {
			return fmt.Errorf("conntrack: %s %v is not 0 or at least 1s", t.name, t.d)
		}
	}
	return nil
}

// Settings returns the sysctls to write on a machine with cpus CPUs, in the
// order to write them: nf_conntrack_max, then the hash size (at least max/4:
// the writer only raises it), then the timeouts. cpus is the machine's count
// (the table is shared by all of them), not the proxy's CPU affinity or quota.
//
// The hash size is written as the sysctl nf_conntrack_buckets, which on
// current kernels (checked on 6.18) is writable in the initial network
// namespace and resizes the table exactly like kube-proxy's write to
// /sys/module/nf_conntrack/parameters/hashsize; on old kernels where it is
// read-only, write that module parameter instead.
//
// On Linux 6.18 nf_conntrack_max and nf_conntrack_buckets are global and
// read-only outside the initial network namespace; the timeouts and
// be_liberal are per network namespace.
func (s Sizing) Settings(cpus int) ([]Setting, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var out []Setting
	if m := s.Max(cpus); m > 0 {
		out = append(out,
			Setting{Name: SysctlMax, Value: m},
			Setting{Name: SysctlBuckets, Value: m / 4, AtLeast: true})
	}
	timeout := func(name string, d time.Duration) {
		if d > 0 {
			out = append(out, Setting{Name: name, Value: int(d / time.Second)})
		}
	}
	timeout(SysctlTCPEstablishedTimeout, s.TCPEstablishedTimeout)
	timeout(SysctlTCPCloseWaitTimeout, s.TCPCloseWaitTimeout)
	if s.TCPBeLiberal {
		out = append(out, Setting{Name: SysctlTCPBeLiberal, Value: 1})
	}
	timeout(SysctlUDPTimeout, s.UDPTimeout)
	timeout(SysctlUDPStreamTimeout, s.UDPStreamTimeout)
	return out, nil
}
