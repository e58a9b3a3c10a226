package proxy

import (
	"context"
	"time"
)

// minRetryInterval is the shortest wait before retrying a failed sync, so
// that a MinInterval of 0 does not retry in a tight loop.
const minRetryInterval = 50 * time.Millisecond

// Loop runs a sync function when asked and on a period, with these
// guarantees:
//
//   - never two runs that start closer than MinInterval;
//   - a run is periodic (Sync is told so) at least every MaxInterval,
//     counted from the end of the previous periodic run, whatever other
//     runs happened since: the sync function repairs the kernel's state in
//     those runs, and when one takes longer than MaxInterval the next still
//     waits MaxInterval;
//   - requests that arrive while a run is pending or in progress are
//     coalesced into one later run, and never lost: the sync function
//     always works from the latest state; a request runs as soon as
//     MinInterval allows, also while retries are backing off;
//   - a run that fails is retried, counted from its end, after a back-off
//     that doubles with each consecutive failure, from RetryInterval
//     (MinInterval when 0, and at least minRetryInterval) up to
//     MaxInterval; a success resets it.
type Loop struct {
	MinInterval   time.Duration
	MaxInterval   time.Duration
	RetryInterval time.Duration
	// Sync does the work; periodic is true for the periodic runs (never
	// for the first). Its error schedules a retry.
	Sync func(ctx context.Context, periodic bool) error

	requests chan struct{}
}

// NewLoop returns a Loop; Request may be called before Run.
func NewLoop(minInterval, maxInterval time.Duration, sync func(ctx context.Context, periodic bool) error) *Loop {
	return &Loop{MinInterval: minInterval, MaxInterval: maxInterval, Sync: sync, requests: make(chan struct{}, 1)}
}

// Request asks for a sync. It never blocks.
func (l *Loop) Request() {
	select {
	case l.requests <- struct{}{}:
	default: // a request is already pending: coalesced
	}
}

// Run syncs once at once, then as requested, periodically and on retries,
// until ctx is done.
func (l *Loop) Run(ctx context.Context) {
	retry := l.RetryInterval
	if retry <= 0 {
		retry = l.MinInterval
	}
	s := &schedule{min: l.MinInterval, max: l.MaxInterval, retry: max(retry, minRetryInterval)}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.requests:
			s.requested = true
			resetTimer(timer, time.Until(s.due()))
			continue
		case <-timer.C:
		}
		now := time.Now()
		if due := s.due(); now.Before(due) {
			resetTimer(timer, due.Sub(now))
			continue
		}
		err := l.Sync(ctx, s.start(now))
		s.finish(time.Now(), err)
		resetTimer(timer, time.Until(s.due()))
	}
}

// schedule decides when a Loop runs next from what happened so far. It
// reads no clock: callers pass the time.
type schedule struct {
	min, max, retry time.Duration

	ran          bool
	lastStart    time.Time // start of the last run
	lastEnd      time.Time // end of the last finished run
	lastPeriodic time.Time // end of the last periodic run, or of the first run
	periodic     bool      // the last run started is periodic or the first
	failures     int       // consecutive failed runs
	requested    bool      // a request came after the last run started
}

// due is when the next run should start: at once before the first run;
// else the earliest of the next periodic run, the retry of a failure and a
// pending request, but never before MinInterval after the last start.
func (s *schedule) due() time.Time {
	if !s.ran {
		return time.Time{}
	}
	next := s.lastPeriodic.Add(s.max)
	if s.failures > 0 {
		next = earliest(next, s.lastEnd.Add(s.backoff()))
	}
	if s.requested {
		next = earliest(next, s.lastStart)
	}
	if floor := s.lastStart.Add(s.min); next.Before(floor) {
		return floor
	}
	return next
}

// backoff is the wait after the last of s.failures consecutive failures:
// retry × 2^(failures-1), at most max.
func (s *schedule) backoff() time.Duration {
	d := s.retry
	for i := 1; i < s.failures && d < s.max; i++ {
		d *= 2
	}
	return min(d, s.max)
}

// start records a run starting at now and reports whether it is periodic
// (the first run is not).
func (s *schedule) start(now time.Time) (periodic bool) {
	periodic = s.ran && !now.Before(s.lastPeriodic.Add(s.max))
	s.periodic = periodic || !s.ran
	s.ran, s.lastStart, s.requested = true, now, false
	return periodic
}

// finish records the outcome of the run that started last, ending at now.
func (s *schedule) finish(now time.Time, err error) {
	s.lastEnd = now
	if s.periodic {
		s.lastPeriodic = now
	}
	if err != nil {
		s.failures++
	} else {
		s.failures = 0
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(max(d, 0))
}
