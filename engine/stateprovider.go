package engine

import (
	"context"
	"errors"

	"github.com/svcproxy/svcproxy"
	"github.com/svcproxy/svcproxy/state"
)

// StateProvider is the Provider of an Engine fed by a state.State: each
// Desired takes a Snapshot of State and builds its Rulesets with Builder
// (state.Builder.Build: incrementally, each build warning once), and hands
// the new build warnings to OnWarnings when it is set, from the goroutine
// that syncs. A StateProvider without a State or a Builder is an error for
// New, and Desired says so.
type StateProvider struct {
	State      *state.State
	Builder    *state.Builder
	OnWarnings func([]svcproxy.Warning)
}

// Desired builds the Rulesets of a new Snapshot of the State.
func (p StateProvider) Desired(context.Context) (Desired, error) {
	if err := p.check(); err != nil {
		return Desired{}, err
	}
	built, err := p.Builder.Build(p.State.Snapshot())
	if err != nil {
		return Desired{}, err
	}
	if len(built.Warnings) > 0 && p.OnWarnings != nil {
		p.OnWarnings(built.Warnings)
	}
	return Desired{Rulesets: built.Rulesets, Triggers: built.Triggers, TriggersByFamily: built.TriggersByFamily}, nil
}

// check reports what p lacks.
func (p StateProvider) check() error {
	if p.State == nil || p.Builder == nil {
		return errors.New("engine: a StateProvider needs a State and a Builder")
	}
	return nil
}
