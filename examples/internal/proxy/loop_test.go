package proxy

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// recorder is a sync function that records when it ran and fails on demand.
type recorder struct {
	mu    sync.Mutex
	runs  []time.Time
	fails int // the number of next runs that fail
}

func (r *recorder) sync(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, time.Now())
	if r.fails > 0 {
		r.fails--
		return errors.New("injected failure")
	}
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

func (r *recorder) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.runs...)
}

func runLoop(t *testing.T, l *Loop) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitFor polls cond for at most d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestLoopSyncsAtOnceThenEveryMaxInterval(t *testing.T) {
	r := &recorder{}
	l := NewLoop(10*time.Millisecond, 60*time.Millisecond, r.sync)
	runLoop(t, l)
	waitFor(t, 2*time.Second, "3 periodic syncs", func() bool { return r.count() >= 3 })
	runs := r.times()
	for i := 1; i < 3; i++ {
		if gap := runs[i].Sub(runs[i-1]); gap < 55*time.Millisecond {
			t.Errorf("periodic syncs %d and %d only %v apart, want about 60ms", i-1, i, gap)
		}
	}
}

func TestLoopCoalescesRequestsAndKeepsMinInterval(t *testing.T) {
	r := &recorder{}
	l := NewLoop(100*time.Millisecond, time.Hour, r.sync)
	runLoop(t, l)
	waitFor(t, time.Second, "the first sync", func() bool { return r.count() == 1 })
	for range 50 {
		l.Request()
	}
	waitFor(t, time.Second, "the requested sync", func() bool { return r.count() == 2 })
	time.Sleep(250 * time.Millisecond) // room for wrongly repeated syncs
	runs := r.times()
	if len(runs) != 2 {
		t.Fatalf("50 requests gave %d syncs after the first, want 1 (coalesced)", len(runs)-1)
	}
	if gap := runs[1].Sub(runs[0]); gap < 95*time.Millisecond {
		t.Errorf("syncs %v apart, closer than the min interval 100ms", gap)
	}
}

func TestLoopRequestDuringSyncRunsAgain(t *testing.T) {
	var l *Loop
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	var mu sync.Mutex
	runs := 0
	l = NewLoop(time.Millisecond, time.Hour, func(context.Context) error {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		started <- struct{}{}
		if n == 2 {
			<-release // a change arrives while this sync runs
		}
		return nil
	})
	runLoop(t, l)
	<-started
	l.Request()
	<-started
	l.Request()
	close(release)
	select {
	case <-started:
	case <-time.After(time.Second):
		t.Fatal("a request made during a sync was lost")
	}
}

func TestLoopRetriesAfterFailure(t *testing.T) {
	r := &recorder{fails: 2}
	l := NewLoop(5*time.Millisecond, time.Hour, r.sync)
	l.RetryInterval = 20 * time.Millisecond
	runLoop(t, l)
	waitFor(t, 2*time.Second, "two retries after two failures", func() bool { return r.count() >= 3 })
	time.Sleep(60 * time.Millisecond)
	runs := r.times()
	if len(runs) != 3 {
		t.Errorf("got %d syncs, want 3: two failed and one successful, then quiet", len(runs))
	}
	for i := 1; i < len(runs); i++ {
		if gap := runs[i].Sub(runs[i-1]); gap < 18*time.Millisecond {
			t.Errorf("retry %d came %v after the failure, before the retry interval", i, gap)
		}
	}
}
