//go:build scale && linux

package bench

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svcproxy/svcproxy/internal/testkit/scalegen"
	"github.com/svcproxy/svcproxy/nftables"
)

// runBulk times, for each count k of list, an incremental sync over netlink
// that changes the endpoints of k of the n Services (spread evenly, never
// the probe Services), once for each ChangeChunk of chunkList (0: the
// Executor's default; -1: one transaction), each in a fresh lab after a
// first sync of its own. With resync, the lab of the first ChangeChunk also
// times a full resync of the loaded table at the end.
func runBulk(t *testing.T, n int, list, chunkList string, resync bool, rep *report, floors map[string]float64) {
	var counts []int
	for _, f := range strings.Split(list, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 || k > n-2 {
			t.Fatalf("SVCPROXY_SCALE_NFT_BULK: bad count %q (1 to N-2)", f)
		}
		counts = append(counts, k)
	}
	for i, f := range strings.Split(chunkList, ",") {
		chunk, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || chunk < -1 {
			t.Fatalf("SVCPROXY_SCALE_NFT_BULK_CHUNKS: bad ChangeChunk %q", f)
		}
		mode := fmt.Sprintf("chunks of %d", chunk)
		switch chunk {
		case 0:
			mode = fmt.Sprintf("chunks of %d (the default)", nftables.DefaultChangeChunk)
		case -1:
			mode = "one transaction"
		}
		t.Run(fmt.Sprint("changeChunk=", chunk), func(t *testing.T) {
			bulkLab(t, n, counts, mode, chunk, resync && i == 0, rep, floors)
		})
	}
}

// bulkLab runs runBulk's measurements for one ChangeChunk in a fresh lab.
func bulkLab(t *testing.T, n int, counts []int, mode string, changeChunk int, resync bool, rep *report, floors map[string]float64) {
	c := newCluster(t)
	w := world(t, c, n)
	ctx := context.Background()
	c.Node.ToolOnPath(t, "nft")
	e := netlinkExecutorConfig(t, c.Node.NS, nftables.ExecutorConfig{Netlink: true, ChangeChunk: changeChunk})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := e.Cleanup(ctx); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	sync := func(what string, wantFull bool) (time.Duration, nftables.SyncDetails) {
		var res nftables.SyncDetails
		rs := w.Ruleset
		d := timed(t, what, func() error {
			out, err := e.Apply(ctx, rs)
			res = out
			if err == nil && out.Full != wantFull {
				err = fmt.Errorf("full sync %v (%v), want %v", out.Full, res.Fallback, wantFull)
			}
			if err == nil && !res.Netlink {
				err = fmt.Errorf("not over netlink: %v", res.NotNetlink)
			}
			return err
		})
		return d, res
	}
	lastService := netip.AddrPortFrom(scalegen.ClusterIP(n-1), 80)
	first, _ := sync("first sync", true)
	rep.add(n, fmt.Sprintf("nftables, lab for incremental syncs in %s: first sync", mode), ms(first), "ms", "nft-full-chunked1000", floors)
	for v, k := range counts {
		// Services 1 … n-2, k of them evenly spread; a version other than
		// the previous count's, so that every one of them changes.
		for j := range k - 1 {
			w.Endpoints.Update(w.Spec.ChangedSlice(1+j*(n-2)/k, v%2+1))
		}
		w.ChangeEndpoints(1+(k-1)*(n-2)/k, v%2+1)
		d, res := sync(fmt.Sprintf("incremental sync, %d Services changed (%s)", k, mode), false)
		rep.add(n, fmt.Sprintf("nftables: incremental sync over netlink, %d Services changed, %s (%d transactions, %d operations)", k, mode, res.Transactions, res.Operations), ms(d), "ms", "", floors)
		if _, err := c.Clients[0].TCP(lastService, 2*time.Second); err != nil {
			t.Errorf("last Service after %d changes: %v", k, err)
		}
	}
	if resync {
		e.RequestFullSync()
		d, res := sync("full resync of the loaded table", true)
		rep.add(n, fmt.Sprintf("nftables: full resync of the loaded table after those changes (%d transactions, %d operations)", res.Transactions, res.Operations), ms(d), "ms", "nft-full-1tx", floors)
	}
}
