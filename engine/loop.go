package engine

import (
	"context"
	"errors"
	"time"

	"github.com/svcproxy/svcproxy/ruleset"
)

// minRetryInterval is the shortest wait before retrying a failed sync, so
// that a MinSyncPeriod of 0 does not retry in a tight loop.
const minRetryInterval = 50 * time.Millisecond

// loop runs a sync function when asked and on a period, with these
// guarantees:
//
//   - never two runs that start closer than min;
//   - a run is periodic (sync is told so) at least every max, counted from
//     the end of the previous periodic run, whatever other runs happened
//     since: the sync function repairs the kernel's state in those runs,
//     and when one takes longer than max the next still waits max;
//   - requests that arrive while a run is pending or in progress are
//     coalesced into one later run, and never lost: the sync function
//     always works from the latest state; a request runs as soon as min
//     allows, also while retries are backing off;
//   - a run that fails is retried, counted from its end, after a back-off
//     that doubles with each consecutive failure, from retry (min when 0,
//     and at least minRetryInterval) up to max; a success resets it;
//   - a run that fails with a configuration error (one that wraps
//     ruleset.ErrConfig) is not retried, and no periodic run follows it:
//     the next run is the next request's (a change of the state, which
//     may change the configuration);
//   - a run that succeeds and asks to run again after a delay (the
//     backends' SyncResult.NextSync) runs again after it, but never before
//     min.
type loop struct {
	min, max, retry time.Duration
	clock           Clock
	// sync does the work; periodic is true for the periodic runs (never
	// for the first). Its error schedules a retry; again > 0 asks for a
	// run that long after its end.
	sync func(ctx context.Context, periodic bool) (again time.Duration, err error)

	requests chan struct{}
}

func newLoop(minInterval, maxInterval, retry time.Duration, clock Clock, sync func(context.Context, bool) (time.Duration, error)) *loop {
	return &loop{min: minInterval, max: maxInterval, retry: retry, clock: clock, sync: sync, requests: make(chan struct{}, 1)}
}

// request asks for a run. It never blocks.
func (l *loop) request() {
	select {
	case l.requests <- struct{}{}:
	default: // a request is already pending: coalesced
	}
}

// run runs once at once, then as requested, periodically and on retries,
// until ctx is done.
func (l *loop) run(ctx context.Context) {
	retry := l.retry
	if retry <= 0 {
		retry = l.min
	}
	s := &schedule{min: l.min, max: l.max, retry: max(retry, minRetryInterval)}
	for {
		var wait <-chan time.Time // nil: a request alone ends the wait
		if !s.idle() {
			wait = l.clock.After(max(s.due().Sub(l.clock.Now()), 0))
		}
		select {
		case <-ctx.Done():
			return
		case <-l.requests:
			s.requested = true
			continue
		case <-wait:
		}
		now := l.clock.Now()
		if s.idle() || now.Before(s.due()) {
			continue
		}
		again, err := l.sync(ctx, s.start(now))
		s.finish(l.clock.Now(), again, err)
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
	configErr    bool      // the last run failed with a configuration error
	again        time.Time // when the last run asked to run again; zero if not
}

// due is when the next run should start: at once before the first run;
// else the earliest of the next periodic run, the retry of a failure, the
// run the last one asked for and a pending request, but never before min
// after the last start.
func (s *schedule) due() time.Time {
	if !s.ran {
		return time.Time{}
	}
	next := s.lastPeriodic.Add(s.max)
	if s.failures > 0 {
		next = earliest(next, s.lastEnd.Add(s.backoff()))
	}
	if !s.again.IsZero() {
		next = earliest(next, s.again)
	}
	if s.requested {
		next = earliest(next, s.lastStart)
	}
	if floor := s.lastStart.Add(s.min); next.Before(floor) {
		return floor
	}
	return next
}

// idle reports that no run is due until a request: the last run failed
// with a configuration error, and no request came since it started.
func (s *schedule) idle() bool { return s.configErr && !s.requested }

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

// finish records the outcome of the run that started last, ending at now,
// which asked to run again after again when positive.
func (s *schedule) finish(now time.Time, again time.Duration, err error) {
	s.lastEnd = now
	s.again = time.Time{}
	if again > 0 && err == nil {
		s.again = now.Add(again)
	}
	if s.periodic {
		s.lastPeriodic = now
	}
	s.configErr = errors.Is(err, ruleset.ErrConfig)
	switch {
	case s.configErr:
		s.failures = 0
	case err != nil:
		s.failures++
	default:
		s.failures = 0
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
