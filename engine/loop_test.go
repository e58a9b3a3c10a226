package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// recorder is a sync function that records when it ran, whether the run
// was periodic, and fails on demand.
type recorder struct {
	mu       sync.Mutex
	runs     []time.Time
	periodic []bool
	fails    int           // the number of next runs that fail
	again    time.Duration // what a successful run asks for
}

func (r *recorder) sync(_ context.Context, periodic bool) (time.Duration, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, time.Now())
	r.periodic = append(r.periodic, periodic)
	if r.fails > 0 {
		r.fails--
		return 0, false, errors.New("injected failure")
	}
	return r.again, false, nil
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

func runLoop(t *testing.T, l *loop) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx); close(done) }()
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
	l := newLoop(10*time.Millisecond, 60*time.Millisecond, 0, realClock{}, r.sync)
	runLoop(t, l)
	waitFor(t, 2*time.Second, "3 periodic syncs", func() bool { return r.count() >= 3 })
	runs := r.times()
	for i := 1; i < 3; i++ {
		if gap := runs[i].Sub(runs[i-1]); gap < 55*time.Millisecond {
			t.Errorf("periodic syncs %d and %d only %v apart, want about 60ms", i-1, i, gap)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if diff := cmp.Diff([]bool{false, true, true}, r.periodic[:3]); diff != "" {
		t.Errorf("periodic flags of the first three runs (-want +got):\n%s", diff)
	}
}

func TestLoopCoalescesRequestsAndKeepsMinInterval(t *testing.T) {
	r := &recorder{}
	l := newLoop(100*time.Millisecond, time.Hour, 0, realClock{}, r.sync)
	runLoop(t, l)
	waitFor(t, time.Second, "the first sync", func() bool { return r.count() == 1 })
	for range 50 {
		l.request()
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
	var l *loop
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	var mu sync.Mutex
	runs := 0
	l = newLoop(time.Millisecond, time.Hour, 0, realClock{}, func(context.Context, bool) (time.Duration, bool, error) {
		mu.Lock()
		runs++
		n := runs
		mu.Unlock()
		started <- struct{}{}
		if n == 2 {
			<-release // a change arrives while this sync runs
		}
		return 0, false, nil
	})
	runLoop(t, l)
	<-started
	l.request()
	<-started
	l.request()
	close(release)
	select {
	case <-started:
	case <-time.After(time.Second):
		t.Fatal("a request made during a sync was lost")
	}
}

// TestLoopRetriesBackOff: retries after consecutive failures wait 20, 40
// and 80 ms; after the success the loop is quiet.
func TestLoopRetriesBackOff(t *testing.T) {
	r := &recorder{fails: 3}
	l := newLoop(5*time.Millisecond, time.Hour, 20*time.Millisecond, realClock{}, r.sync)
	runLoop(t, l)
	waitFor(t, 2*time.Second, "three retries after three failures", func() bool { return r.count() >= 4 })
	time.Sleep(100 * time.Millisecond)
	runs := r.times()
	if len(runs) != 4 {
		t.Errorf("got %d syncs, want 4: three failed and one successful, then quiet", len(runs))
	}
	for i := 1; i < len(runs); i++ {
		want := 20 * time.Millisecond << (i - 1)
		if gap := runs[i].Sub(runs[i-1]); gap < want {
			t.Errorf("retry %d came %v after the failure, before the back-off %v", i, gap, want)
		}
	}
}

// TestLoopRequestCutsBackOff: a request made while a retry is backing off
// runs after the min interval, not at the end of the back-off.
func TestLoopRequestCutsBackOff(t *testing.T) {
	r := &recorder{fails: 1}
	l := newLoop(10*time.Millisecond, time.Hour, time.Hour, realClock{}, r.sync)
	runLoop(t, l)
	waitFor(t, time.Second, "the failed first sync", func() bool { return r.count() == 1 })
	l.request()
	waitFor(t, time.Second, "the requested sync, during the back-off", func() bool { return r.count() == 2 })
}

// TestSchedule checks when the loop runs next and which runs are periodic,
// with MinInterval 1s, MaxInterval 30s and RetryInterval 1s, after runs
// that started at the given times and failed or not.
func TestSchedule(t *testing.T) {
	type run struct {
		at, took     time.Duration
		again        time.Duration
		fail         bool
		checked      bool // the run only checked
		wantPeriodic bool
	}
	ok := func(at time.Duration) run { return run{at: at} }
	failed := func(at time.Duration) run { return run{at: at, fail: true} }
	periodic := func(r run) run { r.wantPeriodic = true; return r }
	taking := func(took time.Duration, r run) run { r.took = took; return r }
	asking := func(again time.Duration, r run) run { r.again = again; return r }
	checking := func(r run) run { r.checked = true; return r }
	s := time.Second
	for _, tt := range []struct {
		name      string
		runs      []run
		requested bool
		want      time.Duration
	}{
		{name: "first run at once", want: 0},
		{name: "after a success, one period later", runs: []run{ok(0)}, want: 30 * s},
		{name: "a request waits for MinInterval", runs: []run{ok(0)}, requested: true, want: s},
		{name: "the period counts from the last periodic run, not from requested ones",
			runs: []run{ok(0), ok(10 * s), ok(20 * s), ok(29 * s)}, want: 30 * s},
		{name: "a run at the period is periodic", runs: []run{ok(0), ok(29 * s), periodic(ok(30 * s))}, want: 60 * s},
		{name: "first retry after RetryInterval", runs: []run{failed(0)}, want: s},
		{name: "retries double", runs: []run{failed(0), failed(s), failed(3 * s)}, want: 7 * s},
		{name: "a request during back-off runs after MinInterval",
			runs: []run{failed(0), failed(s), failed(3 * s)}, requested: true, want: 4 * s},
		{name: "back-off is cut short by the periodic run",
			runs: []run{failed(0), failed(s), failed(3 * s), failed(7 * s), failed(15 * s)}, want: 30 * s},
		{name: "back-off stops at MaxInterval",
			runs: []run{failed(0), failed(s), failed(3 * s), failed(7 * s), failed(15 * s), periodic(failed(30 * s))}, want: 60 * s},
		{name: "a success resets the back-off", runs: []run{failed(0), failed(s), ok(3 * s), failed(10 * s)}, want: 11 * s},
		{name: "a periodic run longer than the period: the next waits a period after its end",
			runs: []run{ok(0), periodic(taking(45*s, ok(30*s)))}, want: 105 * s},
		{name: "a retry waits its back-off after the end of a long failed run",
			runs: []run{ok(0), taking(20*s, failed(5*s))}, want: 26 * s},
		{name: "a request waits MinInterval from the start of a long run",
			runs: []run{ok(0), taking(20*s, ok(5*s))}, requested: true, want: 6 * s},
		{name: "a run that asks to run again runs then", runs: []run{asking(5*s, ok(0))}, want: 5 * s},
		{name: "a run asked for waits MinInterval from the start",
			runs: []run{asking(100*time.Millisecond, ok(0))}, want: s},
		{name: "a run asked for after the period: the periodic run comes first",
			runs: []run{asking(40*s, ok(0))}, want: 30 * s},
		{name: "a failed run's request to run again is ignored: the back-off decides",
			runs: []run{asking(100*s, failed(0)), failed(s)}, want: 3 * s},
		{name: "only the last run's request counts", runs: []run{asking(5*s, ok(0)), ok(2 * s)}, want: 30 * s},
		{name: "a request right after a periodic run that only checked runs at once",
			runs: []run{ok(0), periodic(checking(taking(s/10, ok(30*s))))}, requested: true, want: 30 * s},
		{name: "a request after a check waits MinInterval from the last run that did more",
			runs: []run{ok(0), ok(29*s + s/2), periodic(checking(ok(30 * s)))}, requested: true, want: 30*s + s/2},
		{name: "a periodic run that changed something counts for MinInterval",
			runs: []run{ok(0), periodic(ok(30 * s))}, requested: true, want: 31 * s},
		{name: "a failed check counts for MinInterval",
			runs: []run{ok(0), periodic(checking(failed(30 * s)))}, requested: true, want: 31 * s},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			sc := &schedule{min: s, max: 30 * s, retry: s}
			for i, r := range tt.runs {
				if got := sc.start(t0.Add(r.at)); got != r.wantPeriodic {
					t.Errorf("run %d at %v: periodic %v, want %v", i, r.at, got, r.wantPeriodic)
				}
				var err error
				if r.fail {
					err = errors.New("injected")
				}
				sc.finish(t0.Add(r.at+r.took), r.again, r.checked, err)
			}
			sc.requested = tt.requested
			if got := sc.due().Sub(t0); len(tt.runs) > 0 && got != tt.want {
				t.Errorf("next run at %v, want %v", got, tt.want)
			}
			if len(tt.runs) == 0 && !sc.due().IsZero() {
				t.Errorf("first run due at %v, want at once", sc.due())
			}
		})
	}
}

// TestScheduleAttemptsWhileFailing: with min-sync-period 1s and
// sync-period 30s, a sync that always fails is attempted 6 times in its
// first minute (at 0, 1, 3, 7, 15 and 30 s) and twice a minute after,
// where retrying every MinInterval made 60 attempts a minute.
func TestScheduleAttemptsWhileFailing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sc := &schedule{min: time.Second, max: 30 * time.Second, retry: time.Second}
	perMinute := map[int]int{}
	for now := t0; now.Before(t0.Add(5 * time.Minute)); now = sc.due() {
		sc.start(now)
		sc.finish(now, 0, false, errors.New("injected"))
		perMinute[int(now.Sub(t0)/time.Minute)]++
	}
	if diff := cmp.Diff(map[int]int{0: 6, 1: 2, 2: 2, 3: 2, 4: 2}, perMinute); diff != "" {
		t.Errorf("attempts per minute (-want +got):\n%s", diff)
	}
}
