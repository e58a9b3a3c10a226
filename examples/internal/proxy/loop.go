package proxy

import (
	"context"
	"time"
)

// Loop runs a sync function when asked, never two runs closer than
// MinInterval, and at least every MaxInterval. Requests that arrive while a
// run is pending or in progress are coalesced into one later run. A run that
// fails is retried after RetryInterval (MinInterval when 0), and requests are
// never lost: the sync function always works from the latest state.
type Loop struct {
	MinInterval   time.Duration
	MaxInterval   time.Duration
	RetryInterval time.Duration
	// Sync does the work; its error schedules a retry.
	Sync func(context.Context) error

	requests chan struct{}
}

// NewLoop returns a Loop; Request may be called before Run.
func NewLoop(minInterval, maxInterval time.Duration, sync func(context.Context) error) *Loop {
	return &Loop{MinInterval: minInterval, MaxInterval: maxInterval, Sync: sync, requests: make(chan struct{}, 1)}
}

// Request asks for a sync. It never blocks.
func (l *Loop) Request() {
	select {
	case l.requests <- struct{}{}:
	default: // a request is already pending: coalesced
	}
}

// Run syncs once at once, then as requested, until ctx is done.
func (l *Loop) Run(ctx context.Context) {
	retry := l.RetryInterval
	if retry <= 0 {
		retry = l.MinInterval
	}
	var lastStart time.Time
	next := time.Now() // the first sync runs at once
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.requests:
			// Run as soon as MinInterval allows, unless a run is already due sooner.
			if earliest := lastStart.Add(l.MinInterval); earliest.Before(next) {
				next = earliest
			}
			resetTimer(timer, time.Until(next))
			continue
		case <-timer.C:
		}
		if wait := time.Until(lastStart.Add(l.MinInterval)); wait > 0 {
			next = time.Now().Add(wait)
			resetTimer(timer, wait)
			continue
		}
		lastStart = time.Now()
		if err := l.Sync(ctx); err != nil {
			next = time.Now().Add(retry)
		} else {
			next = lastStart.Add(l.MaxInterval)
		}
		resetTimer(timer, time.Until(next))
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(max(d, 0))
}
