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

var bucketLine = regexp.MustCompile(`^` + programmingMetric + `_bucket\{le="([^"]+)"\} (\d+)$`)

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

// fractionWithin is the share of h's observations at most bound, which must
// be one of its bucket bounds, as a percentage; "—" with no observations.
func (h histogram) fractionWithin(bound float64) string {
	i := slices.Index(h.bounds, bound)
	if i < 0 || h.count == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(h.counts[i])/float64(h.count))
}
