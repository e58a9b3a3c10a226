package proxy

import (
	"net/http"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svcproxy/svcproxy/engine"
	"github.com/svcproxy/svcproxy/iptables"
	"github.com/svcproxy/svcproxy/manifests"
	"github.com/svcproxy/svcproxy/ruleset"
	"github.com/svcproxy/svcproxy/state"
)

// metrics is the registry that /metrics serves, which the engine registers
// its sync metrics with, and the proxy's own metrics: kube-proxy's
// changes-pending gauges, changes counters, health answer counters and
// per-mode metrics, and svcproxy's manifest counters.
type metrics struct {
	registry               *prometheus.Registry
	serviceChangesPending  prometheus.Gauge
	endpointChangesPending prometheus.Gauge
	// serviceChanges and endpointChanges are kube-proxy's counts of the
	// Service and EndpointSlice events its proxiers took in (recordEvent).
	serviceChanges, endpointChanges prometheus.Counter
	// healthzAnswers and livezAnswers are kube-proxy's counts of the
	// answers of /healthz and /livez, by status code (countAnswers).
	healthzAnswers, livezAnswers *prometheus.CounterVec
	// manifestErrors counts the reads of --manifests that failed;
	// manifestReloads the ones applied.
	manifestErrors, manifestReloads prometheus.Counter
	// healthPorts counts the health check node ports by state: "serving"
	// (on every address) or "unbound" (on one address at least, retried
	// at each sync).
	healthPorts *prometheus.GaugeVec
	// noLocalEndpoints is kube-proxy's count, per family synced, of the
	// Service ports whose traffic a Local policy drops for want of a
	// local endpoint: "internal" (to the cluster IP) or "external".
	noLocalEndpoints *prometheus.GaugeVec
	// nftablesSyncFailures is kube-proxy's nftables-mode count of the
	// syncs of a family that failed; nil but for the nftables proxy.
	nftablesSyncFailures *prometheus.CounterVec
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Subsystem: "kubeproxy", Name: name, Help: help})
}

func newMetrics() *metrics {
	m := &metrics{
		registry:               prometheus.NewRegistry(),
		serviceChangesPending:  gauge("sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes"),
		endpointChangesPending: gauge("sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes"),
		serviceChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_service_changes_total",
			Help: "Cumulative proxy rules Service changes",
		}),
		endpointChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "sync_proxy_rules_endpoint_changes_total",
			Help: "Cumulative proxy rules Endpoint changes",
		}),
		healthzAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "proxy_healthz_total",
			Help: "Cumulative proxy healthz HTTP status",
		}, []string{"code"}),
		livezAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubeproxy", Name: "proxy_livez_total",
			Help: "Cumulative proxy livez HTTP status",
		}, []string{"code"}),
		manifestErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "svcproxy", Name: "manifest_errors_total",
			Help: "Reads of the manifests that failed (the rules stayed as they were)",
		}),
		manifestReloads: prometheus.NewCounter(prometheus.CounterOpts{
			Subsystem: "svcproxy", Name: "manifest_reloads_total",
			Help: "Changed manifests read and applied",
		}),
	}
	m.healthPorts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "svcproxy", Name: "health_check_node_ports",
		Help: "Health check node ports by state: serving (on every address) or unbound (on one address at least; retried at each sync)",
	}, []string{"state"})
	m.noLocalEndpoints = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "kubeproxy", Name: "sync_proxy_rules_no_local_endpoints_total",
		Help: "Number of services with a Local traffic policy and no endpoints",
	}, []string{"traffic_policy", "ip_family"})
	m.registry.MustRegister(m.noLocalEndpoints, m.healthPorts, m.manifestErrors, m.manifestReloads, m.serviceChangesPending, m.endpointChangesPending,
		m.serviceChanges, m.endpointChanges, m.healthzAnswers, m.livezAnswers)
	return m
}

// recordEvent counts an event's object as kube-proxy's change trackers
// count it, for a proxy of families. Each proxier of a family counts
// every Service event, whatever the Service's families and whether
// anything changed; an EndpointSlice event counts in the proxier of the
// slice's address family alone (not at all for an FQDN slice or one of a
// family not served), when the slice names its Service
// (kubernetes.io/service-name) and has a namespace and a name.
func (m *metrics) recordEvent(obj any, families []v1.IPFamily) {
	switch o := obj.(type) {
	case *v1.Service:
		m.serviceChanges.Add(float64(len(families)))
	case *discovery.EndpointSlice:
		var family v1.IPFamily
		switch o.AddressType {
		case discovery.AddressTypeIPv4:
			family = v1.IPv4Protocol
		case discovery.AddressTypeIPv6:
			family = v1.IPv6Protocol
		}
		if slices.Contains(families, family) && o.Labels[discovery.LabelServiceName] != "" && o.Namespace != "" && o.Name != "" {
			m.endpointChanges.Inc()
		}
	}
}

// recordManifests counts, with recordEvent, the events that a relist of
// the API server would give for manifests read after before (nil: none
// read yet): one for each Service and EndpointSlice of after, and one for
// each of before that after does not hold.
func (m *metrics) recordManifests(before, after *manifests.Input, families []v1.IPFamily) {
	var prev, cur state.Objects
	if before != nil && before.Objects != nil {
		prev = *before.Objects
	}
	if after != nil && after.Objects != nil {
		cur = *after.Objects
	}
	record := func(obj any) { m.recordEvent(obj, families) }
	relist(prev.Services, cur.Services, record)
	relist(prev.EndpointSlices, cur.EndpointSlices, record)
}

// relist calls record with each object of cur and each of prev whose
// namespace and name cur does not hold (nil objects left out).
func relist[T interface {
	comparable
	metav1.Object
}](prev, cur []T, record func(any)) {
	var none T
	held := map[types.NamespacedName]bool{}
	for _, o := range cur {
		if o != none {
			held[types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}] = true
			record(o)
		}
	}
	for _, o := range prev {
		if o != none && !held[types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}] {
			record(o)
		}
	}
}

// countAnswers returns h, counting each of its answers in answers by
// status code ("200", "503"), as kube-proxy counts those of /healthz and
// /livez: before the answer is sent.
func countAnswers(answers *prometheus.CounterVec, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w, answers: answers}
		h.ServeHTTP(cw, r)
		cw.count(http.StatusOK) // an answer without a header or body
	})
}

// countingWriter counts the status code of the answer written through it,
// once.
type countingWriter struct {
	http.ResponseWriter
	answers *prometheus.CounterVec
	counted bool
}

func (w *countingWriter) count(code int) {
	if !w.counted {
		w.counted = true
		w.answers.WithLabelValues(strconv.Itoa(code)).Inc()
	}
}

func (w *countingWriter) WriteHeader(code int) {
	w.count(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.count(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// counterReader is a backend that reads kube-proxy's nfacct counters: the
// iptables Executor with NFAcct.
type counterReader interface {
	Counter(name string) (uint64, error)
	NFAcctErr() error
}

// nfacctMetrics are kube-proxy's iptables-mode metrics read from its
// nfacct counters (iptables.Counters), under its names, without labels:
// the counters belong to the network namespace, whatever the family.
var nfacctMetrics = []struct{ counter, name, help string }{
	{iptables.CounterInvalidDropped, "kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
		"packets dropped by iptables to work around conntrack problems"},
	{iptables.CounterLocalhostNodePorts, "kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
		"Number of packets accepted on nodeports of loopback interface"},
}

// nfacctCollector exports one nfacct counter, read at each scrape; a
// counter that cannot be read is left out of the scrape, as kube-proxy
// does.
type nfacctCollector struct {
	desc    *prometheus.Desc
	counter string
	read    func(string) (uint64, error)
}

func (c nfacctCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c nfacctCollector) Collect(ch chan<- prometheus.Metric) {
	if v, err := c.read(c.counter); err == nil {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v))
	}
}

// registerCounters registers the nfacct metrics read from the first
// backend (IPv4 first) that reads counters, when it can: like kube-proxy,
// a kernel without nfnetlink_acct has no such metrics (which is logged).
func (m *metrics) registerCounters(backends []any) error {
	for _, b := range backends {
		r, ok := b.(counterReader)
		if !ok {
			continue
		}
		if err := r.NFAcctErr(); err != nil {
			return err
		}
		for _, nm := range nfacctMetrics {
			m.registry.MustRegister(nfacctCollector{desc: prometheus.NewDesc(nm.name, nm.help, nil, nil), counter: nm.counter, read: r.Counter})
		}
		return nil
	}
	return nil
}

// statsReader is a backend that counts kube-proxy's iptables-mode
// statistics: the iptables Executor.
type statsReader interface {
	Stats() iptables.Stats
}

// iptablesStats exports kube-proxy's iptables-mode metrics of the rules
// and restores, with its table and ip_family labels, from each family's
// statsReader, read at each scrape.
type iptablesStats struct {
	backends                                   map[string]statsReader // by IP family
	total, last, restoreFailures, partialFails *prometheus.Desc
}

func newIPTablesStats(backends map[string]statsReader) *iptablesStats {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("kubeproxy_"+name, help, append(labels, "ip_family"), nil)
	}
	return &iptablesStats{
		backends:        backends,
		total:           desc("sync_proxy_rules_iptables_total", "Total number of iptables rules owned by kube-proxy", "table"),
		last:            desc("sync_proxy_rules_iptables_last", "Number of iptables rules written by kube-proxy in last sync", "table"),
		restoreFailures: desc("sync_proxy_rules_iptables_restore_failures_total", "Cumulative proxy iptables restore failures"),
		partialFails:    desc("sync_proxy_rules_iptables_partial_restore_failures_total", "Cumulative proxy iptables partial restore failures"),
	}
}

func (s *iptablesStats) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.total, s.last, s.restoreFailures, s.partialFails} {
		ch <- d
	}
}

func (s *iptablesStats) Collect(ch chan<- prometheus.Metric) {
	for family, b := range s.backends {
		st := b.Stats()
		for _, table := range []string{"filter", "nat"} {
			if n, ok := st.Rules[table]; ok {
				ch <- prometheus.MustNewConstMetric(s.total, prometheus.GaugeValue, float64(n), table, family)
			}
			if n, ok := st.LastSync[table]; ok {
				ch <- prometheus.MustNewConstMetric(s.last, prometheus.GaugeValue, float64(n), table, family)
			}
		}
		ch <- prometheus.MustNewConstMetric(s.restoreFailures, prometheus.CounterValue, float64(st.RestoreFailures), family)
		ch <- prometheus.MustNewConstMetric(s.partialFails, prometheus.CounterValue, float64(st.PartialRestoreFailures), family)
	}
}

// registerStats registers kube-proxy's iptables-mode statistics when the
// backends count them.
func (m *metrics) registerStats(backends map[string]any) {
	readers := map[string]statsReader{}
	for family, b := range backends {
		if r, ok := b.(statsReader); ok {
			readers[family] = r
		}
	}
	if len(readers) > 0 {
		m.registry.MustRegister(newIPTablesStats(readers))
	}
}

// recordNoLocalEndpoints sets the no-local-endpoints gauges of the family
// of rs, as kube-proxy's proxier of that family does after each sync.
func (m *metrics) recordNoLocalEndpoints(rs *ruleset.Ruleset) {
	if rs == nil {
		return
	}
	var internal, external int
	for _, s := range rs.Services() {
		if s.Internal == ruleset.RouteDrop {
			internal++
		}
		if s.External == ruleset.RouteDrop {
			external++
		}
	}
	family := string(rs.Config().Family)
	m.noLocalEndpoints.WithLabelValues("internal", family).Set(float64(internal))
	m.noLocalEndpoints.WithLabelValues("external", family).Set(float64(external))
}

// registerNFTablesFailures registers kube-proxy's nftables-mode count of
// failed syncs, at zero for each of families.
func (m *metrics) registerNFTablesFailures(families []v1.IPFamily) {
	m.nftablesSyncFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "kubeproxy", Name: "sync_proxy_rules_nftables_sync_failures_total",
		Help: "Cumulative proxy nftables sync failures",
	}, []string{"ip_family"})
	for _, f := range families {
		m.nftablesSyncFailures.WithLabelValues(string(f))
	}
	m.registry.MustRegister(m.nftablesSyncFailures)
}

// recordFailedFamilies counts, for the nftables proxy, the families whose
// backend did not sync although the state was built.
func (m *metrics) recordFailedFamilies(families []v1.IPFamily, ev engine.SyncEvent) {
	if m.nftablesSyncFailures == nil || ev.Rulesets == nil {
		return
	}
	for _, f := range families {
		if _, ok := ev.Results[f]; !ok {
			m.nftablesSyncFailures.WithLabelValues(string(f)).Inc()
		}
	}
}
