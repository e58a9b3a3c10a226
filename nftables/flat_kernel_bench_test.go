//go:build linux

package nftables_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	gnft "github.com/google/nftables"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
	"github.com/svcproxy/svcproxy/nftables"
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
		_, script, _ := nftables.FlatScript(rs, nftables.Options{})
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
			set := &gnft.Set{Table: &gnft.Table{Family: gnft.TableFamilyIPv4, Name: nftables.DefaultFlatTable}, Name: "cluster-ips"}
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
				add := nftnl.NewBatch(nftnl.IPv4, nftables.DefaultFlatTable)
				add.AddElements("cluster-ips", []nftnl.Element{{Key: key, Comment: "bench/element:p80/TCP"}})
				if err := c.Send(add); err != nil {
					b.Fatal(err)
				}
				del := nftnl.NewBatch(nftnl.IPv4, nftables.DefaultFlatTable)
				del.DelElements("cluster-ips", [][]byte{key})
				if err := c.Send(del); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
