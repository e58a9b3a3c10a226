//go:build scale && linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

// metricsClient is an HTTP client that dials from inside ns.
func metricsClient(ns *netns.NS) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, address string) (net.Conn, error) {
			remote, err := netip.ParseAddrPort(address)
			if err != nil {
				return nil, fmt.Errorf("dialling %s: %w", address, err)
			}
			return ns.Dial("tcp", netip.AddrPort{}, remote, 5*time.Second)
		},
	}}
}

// histogram is a Prometheus histogram as scraped: cumulative counts by
// upper bound, in increasing order of bound.
type histogram struct {
	bounds []float64
	counts []uint64
	count  uint64
}

// bucketLine is a bucket of programmingMetric: ours, or kube-proxy's for
// IPv4 (kube-proxy labels it by IP family).
var bucketLine = regexp.MustCompile(`^` + programmingMetric + `_bucket\{(?:ip_family="IPv4",)?le="([^"]+)"\} (\d+)$`)

// scrapeHistogram reads programmingMetric from the /metrics at url.
func scrapeHistogram(t *testing.T, client *http.Client, url string) histogram {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	var h histogram
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		m := bucketLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		bound, err1 := strconv.ParseFloat(m[1], 64)
		count, err2 := strconv.ParseUint(m[2], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("scraping %s: bad bucket line %q", url, sc.Text())
		}
		h.bounds, h.counts = append(h.bounds, bound), append(h.counts, count)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	if len(h.counts) == 0 || !slices.IsSorted(h.bounds) || !math.IsInf(h.bounds[len(h.bounds)-1], 1) {
		t.Fatalf("scraping %s: no well-formed %s histogram (bounds %v)", url, programmingMetric, h.bounds)
	}
	h.count = h.counts[len(h.counts)-1]
	return h
}

// waitObservations scrapes every 500 ms, for at most timeout, until the
// histogram holds at least want observations, and returns the last scrape.
func waitObservations(t *testing.T, client *http.Client, url string, want uint64, timeout time.Duration) histogram {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		h := scrapeHistogram(t, client, url)
		if h.count >= want || time.Now().After(deadline) {
			return h
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitSettled scrapes every second, for at most timeout, until two scrapes
// in a row hold the same number of observations (those of the first sync
// may be made after its synced line), and returns the last scrape.
func waitSettled(t *testing.T, client *http.Client, url string, timeout time.Duration) histogram {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := scrapeHistogram(t, client, url)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		h := scrapeHistogram(t, client, url)
		if h.count == last.count {
			return h
		}
		last = h
	}
	t.Fatalf("%s did not settle within %v", programmingMetric, timeout)
	return last
}

// minus is the histogram of the observations made between before and h.
func (h histogram) minus(before histogram) histogram {
	d := histogram{bounds: h.bounds, counts: make([]uint64, len(h.counts)), count: h.count - before.count}
	for i := range h.counts {
		d.counts[i] = h.counts[i] - before.counts[i]
	}
	return d
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile does:
// linearly inside the bucket that holds it (from 0 for the first bucket);
// the largest finite bound when it falls in the +Inf bucket; NaN with no
// observations.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * float64(h.count)
	for i, c := range h.counts {
		if float64(c) < rank {
			continue
		}
		if math.IsInf(h.bounds[i], 1) {
			return h.bounds[i-1]
		}
		lower, below := 0.0, uint64(0)
		if i > 0 {
			lower, below = h.bounds[i-1], h.counts[i-1]
		}
		inBucket := c - below
		if inBucket == 0 {
			return lower
		}
		return lower + (h.bounds[i]-lower)*(rank-float64(below))/float64(inBucket)
	}
	return h.bounds[len(h.bounds)-2]
}

// fractionWithin is the share of h's observations at most bound, which must
// be one of its bucket bounds, as a percentage; "—" with no observations.
func (h histogram) fractionWithin(bound float64) string {
	i := slices.Index(h.bounds, bound)
	if i < 0 || h.count == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(h.counts[i])/float64(h.count))
}
