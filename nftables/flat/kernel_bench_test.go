//go:build linux

package flat_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	gnft "github.com/google/nftables"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables/flat"
	"github.com/svcproxy/svcproxy/nftables/internal/nftnl"
)

// BenchmarkKernelFlatElement adds and deletes one element of the flat
// layout's cluster-ips set, in a table that holds n Services × 10
// endpoints, one transaction each, with the two netlink encoders the
// decision is between: github.com/google/nftables (what model.Conn uses)
// and our own nftables/internal/nftnl.
func BenchmarkKernelFlatElement(b *testing.B) {
	netns.Require(b, "nft")
	lab := netns.NewLab(b)
	ns := lab.NewNS("flatel")
	nft := ns.ToolOnPath(b, "nft")
	for _, n := range []int{1000, 10000} {
		rs, _ := benchWorld(b, n)
		_, script, _ := flat.Script(rs, flat.Options{})
		path := filepath.Join(b.TempDir(), "flat.nft")
		if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		out, err := ns.Run(ctx, nft, "-f", path)
		cancel()
		if err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		key := []byte{198, 19, 255, 1}
		b.Run(fmt.Sprintf("google-nftables/%d", n), func(b *testing.B) {
			var c *gnft.Conn
			if err := ns.Do(func() (err error) { c, err = gnft.New(gnft.AsLasting()); return err }); err != nil {
				b.Fatal(err)
			}
			defer c.CloseLasting()
			set := &gnft.Set{Table: &gnft.Table{Family: gnft.TableFamilyIPv4, Name: flat.DefaultTable}, Name: "cluster-ips"}
			elems := []gnft.SetElement{{Key: key, Comment: "bench/element:p80/TCP"}}
			for b.Loop() {
				if err := c.SetAddElements(set, elems); err != nil {
					b.Fatal(err)
				}
				if err := c.Flush(); err != nil {
					b.Fatal(err)
				}
				if err := c.SetDeleteElements(set, elems); err != nil {
					b.Fatal(err)
				}
				if err := c.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("nftnl/%d", n), func(b *testing.B) {
			var c *nftnl.Conn
			if err := ns.Do(func() (err error) { c, err = nftnl.Dial(); return err }); err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			for b.Loop() {
				add := nftnl.NewBatch(nftnl.IPv4, flat.DefaultTable)
				add.AddElements("cluster-ips", []nftnl.Element{{Key: key, Comment: "bench/element:p80/TCP"}})
				if err := c.Send(add); err != nil {
					b.Fatal(err)
				}
				del := nftnl.NewBatch(nftnl.IPv4, flat.DefaultTable)
				del.DelElements("cluster-ips", [][]byte{key})
				if err := c.Send(del); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkKernelFlatLoad times the elements of a flat first sync over
// netlink (Netlink.Load) into a table whose definitions nft has just
// written (not timed), at 10,000 Services × 10 endpoints: in transactions
// bounded by a socket's default send buffer (net.core.wmem_default, 208
// KiB, which bounded them before Dial raised it), and by the buffer Dial
// forces. tx/op is the number of transactions.
func BenchmarkKernelFlatLoad(b *testing.B) {
	netns.Require(b, "nft")
	lab := netns.NewLab(b)
	ns := lab.NewNS("flatload")
	nft := ns.ToolOnPath(b, "nft")
	rs, _ := benchWorld(b, 10000)
	_, load, _ := flat.FirstSync(rs, flat.Options{})
	path := filepath.Join(b.TempDir(), "defs.nft")
	if err := os.WriteFile(path, []byte(load.Definitions), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		limit int
	}{{"sndbuf=default", 212992 - 4096}, {"sndbuf=forced", 0}} {
		b.Run(c.name, func(b *testing.B) {
			var nl *flat.Netlink
			if err := ns.Do(func() (err error) { nl, err = flat.DialNetlink(); return err }); err != nil {
				b.Fatal(err)
			}
			defer nl.Close()
			if c.limit > 0 {
				flat.LimitTransactions(nl, c.limit)
			}
			var tx int
			for b.Loop() {
				b.StopTimer()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				out, err := ns.Run(ctx, nft, "-f", path)
				cancel()
				if err != nil {
					b.Fatalf("%v\n%s", err, out)
				}
				b.StartTimer()
				if tx, err = nl.Load(load); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(tx), "tx/op")
		})
	}
}
