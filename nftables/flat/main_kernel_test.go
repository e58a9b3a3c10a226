//go:build linux

package flat_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/svcproxy/svcproxy/internal/testkit/netns"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if os.Geteuid() == 0 {
		if swept, err := netns.Sweep(); err != nil || len(swept) > 0 {
			fmt.Fprintf(os.Stderr, "nftables/flat: leftover namespaces %v (swept; %v)\n", swept, err)
			code = 1
		}
	}
	os.Exit(code)
}
