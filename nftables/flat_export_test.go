package nftables

import (
	"github.com/svcproxy/svcproxy/nftables/internal/model"
	"github.com/svcproxy/svcproxy/ruleset"
)

// FlatTable is the typed table that RenderFlat writes for rs.
func FlatTable(rs *ruleset.Ruleset, opts Options) *model.Table {
	_, t, _ := flatTable(rs, opts)
	return t
}
