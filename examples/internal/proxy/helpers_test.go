package proxy

import (
	"io"
	"log/slog"

	v1 "k8s.io/api/core/v1"

	"github.com/svcproxy/svcproxy/servicemap"
	"github.com/svcproxy/svcproxy/state"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// ipv4State is an empty IPv4 State for node n1. state.New fails only on
// bad families, and these are fixed.
func ipv4State() *state.State {
	s, err := state.New([]v1.IPFamily{v1.IPv4Protocol}, "n1", servicemap.Filter{})
	if err != nil {
		panic(err)
	}
	return s
}
