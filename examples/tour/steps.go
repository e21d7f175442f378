package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/examples/fenced-store/store"
)

// Names used by the story.
const (
	jobLock    = "billing/nightly" // steps 1 and 2
	dailyLock  = "reports/daily"   // step 3
	hourlyLock = "reports/hourly"  // step 4
	leaderName = "reports/leader"  // step 5
)

// run tells the story, step by step.
func (t *tour) run(ctx context.Context) error {
	t.n = t.cfg.members
	t.mu.Lock()
	fmt.Fprintf(t.tl, "  time   actor     token  what happened\n")
	t.mu.Unlock()
	t.step(0, "A %d-member etcd cluster starts in this process; a fenced store starts next to it", t.n)
	c, err := embedtest.New(ctx, embedtest.WithMembers(t.n))
	if err != nil {
		return err
	}
	defer c.Close()
	t.cluster = c
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		return err
	}
	t.say("etcd", 0, "%d members up, leader %s; every worker below is its own client with a session of TTL %v",
		t.n, leader.Name(), t.cfg.ttl)
	if t.cfg.ui != "" {
		stopUI, err := t.startUI(ctx, c)
		if err != nil {
			return fmt.Errorf("--ui: %w", err)
		}
		defer stopUI()
	}

	// The fenced store: the resource the workers write to, over HTTP, with
	// their fencing token in the Fencing-Token header.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: store.New(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	t.store = &store.Client{BaseURL: "http://" + ln.Addr().String(), HTTP: &http.Client{Transport: tr}}
	t.say("store", 0, "fenced store on %s: admits a write to a key only with a token >= the highest it has seen", t.store.BaseURL)

	for _, step := range []func(context.Context) error{t.raceAndFreeze, t.minorityDown, t.leaderDown, t.election} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// grant is the outcome of one Lock call.
type grant struct {
	w   *worker
	l   *etcdlock.Lock
	err error
	at  time.Time
}

// awaitGrant waits for the next grant until deadline.
func awaitGrant(ctx context.Context, grants <-chan grant, deadline time.Time) (grant, bool) {
	tm := time.NewTimer(time.Until(deadline))
	defer tm.Stop()
	select {
	case g := <-grants:
		return g, true
	case <-tm.C:
	case <-ctx.Done():
	}
	return grant{}, false
}

// raceAndFreeze is steps 1 and 2: three workers race for a lock, and the
// winner freezes for longer than its TTL.
func (t *tour) raceAndFreeze(ctx context.Context) error {
	t.step(1, "Three workers race for %q; the winner runs the job, the others wait in FIFO order", jobLock)
	var ws []*worker
	defer func() {
		for _, w := range ws {
			w.close()
		}
	}()
	for _, name := range []string{"alice", "bob", "carol"} {
		w, err := t.newWorker(ctx, name, true)
		if err != nil {
			return err
		}
		ws = append(ws, w)
	}

	lctx, stop := context.WithCancel(ctx)
	defer stop()
	grants := make(chan grant, len(ws))
	gun := make(chan struct{})
	for _, w := range ws {
		go func() {
			<-gun
			l, err := etcdlock.NewMutex(w.s, jobLock).Lock(lctx)
			grants <- grant{w, l, err, time.Now()}
		}()
	}
	close(gun)
	first, ok := awaitGrant(ctx, grants, time.Now().Add(10*time.Second))
	if !ok {
		return t.fail("nobody got the free lock %q within 10s", jobLock)
	}
	if first.err != nil {
		return first.err
	}
	t.granted(jobLock, first.l.Token(), false)
	holder := first.w.name
	tok := first.l.Token()
	t.say(holder, tok, "wins the race: Mutex.Lock returned; its token is the create revision of its key")

	// Wait until both losers are queued (a program would not poll like this).
	for deadline := time.Now().Add(10 * time.Second); ; {
		st, err := etcdlock.Describe(ctx, first.w.cli, jobLock)
		if err != nil {
			return err
		}
		if len(st.Waiters) == 2 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the two other workers did not queue within 10s (%d waiters)", len(st.Waiters))
		}
		time.Sleep(20 * time.Millisecond)
	}
	queue, err := t.describe(ctx, first.w.cli, jobLock)
	if err != nil {
		return err
	}
	t.say(holder, tok, "runs the nightly job and writes its first results with its token")
	if err := t.write(ctx, holder, jobLock, tok, holder+": part 1", mustAdmit); err != nil {
		return err
	}

	t.step(2, "The holder freezes for longer than its TTL; the next worker gets the lock; the frozen one wakes up and writes")
	if first.l.Context().Err() != nil {
		return t.fail("%s lost its lock while running: %v", holder, context.Cause(first.l.Context()))
	}
	t.say(holder, tok, "checks Lock.Context(): still held; about to write part 2")
	first.w.link.Cut()
	frozeAt := time.Now()
	t.say(holder, tok, "FREEZES before the write (a GC pause, SIGSTOP, a suspended VM): no keepalives, no traffic at all")

	bound := t.cfg.ttl + 3*time.Second
	next, ok := awaitGrant(ctx, grants, frozeAt.Add(bound))
	if !ok {
		return t.fail("the lock of a frozen holder was not granted to the next waiter within TTL+3s (%v)", bound)
	}
	if next.err != nil {
		return next.err
	}
	t.pausedFree = next.at.Sub(frozeAt)
	t.granted(jobLock, next.l.Token(), false)
	t.say(next.w.name, next.l.Token(), "gets the lock %.1fs after %s froze: etcd expired %s's lease (TTL %v)",
		t.pausedFree.Seconds(), holder, holder, t.cfg.ttl)
	if len(queue) > 0 && next.w.name != queue[0] {
		_ = t.fail("FIFO: %s got the lock, but %s was first in the queue", next.w.name, queue[0])
	}
	if vu := first.w.s.ValidUntil(); vu.Before(next.at) {
		t.say(holder, tok, "(its own validity clock had run out at %+.1fs, before that grant: its Lock.Context() is canceled; it is frozen and cannot look)",
			vu.Sub(t.start).Seconds())
	} else {
		_ = t.fail("%s's session still counted itself valid (until %+.1fs) when the lock passed on", holder, vu.Sub(t.start).Seconds())
	}
	if _, err := t.describe(ctx, next.w.cli, jobLock); err != nil {
		return err
	}
	if err := t.write(ctx, next.w.name, jobLock, next.l.Token(), next.w.name+": the whole run", mustAdmit); err != nil {
		return err
	}

	first.w.link.Restore()
	t.say(holder, tok, "wakes up after %.1fs, still holding its *Lock, and sends the write it had decided on", time.Since(frozeAt).Seconds())
	if err := t.write(ctx, holder, jobLock, tok, holder+": part 2", mustReject); err != nil {
		return err
	}
	t.say(holder, tok, "only now looks at Lock.Context(): %v", context.Cause(first.l.Context()))
	t.say("why", 0, "a lock cannot reach into a frozen process to stop a write it already decided on; only the resource can, by comparing tokens")
	if err := first.l.Unlock(ctx); errors.Is(err, etcdlock.ErrNotHeld) {
		t.say(holder, tok, "Unlock: %v", err)
	} else {
		return t.fail("Unlock of a lost lock returned %v, want ErrNotHeld", err)
	}

	if err := next.l.Unlock(ctx); err != nil {
		return err
	}
	t.say(next.w.name, next.l.Token(), "unlocks")
	third, ok := awaitGrant(ctx, grants, time.Now().Add(10*time.Second))
	if !ok {
		return t.fail("the last waiter did not get the released lock within 10s")
	}
	if third.err != nil {
		return third.err
	}
	t.granted(jobLock, third.l.Token(), false)
	t.say(third.w.name, third.l.Token(), "gets the lock at once (a release wakes exactly the next waiter)")
	if len(queue) > 1 && third.w.name != queue[1] {
		_ = t.fail("FIFO: %s got the lock, but %s was next in the queue", third.w.name, queue[1])
	}
	if err := t.write(ctx, third.w.name, jobLock, third.l.Token(), third.w.name+": tonight's report", mustAdmit); err != nil {
		return err
	}
	if err := third.l.Unlock(ctx); err != nil {
		return err
	}
	t.say(third.w.name, third.l.Token(), "unlocks; grants went %s, %s, %s: the queue's order", holder, next.w.name, third.w.name)
	return nil
}

// minorityDown is step 3: a minority of the members crash; locks are still
// granted; the members come back.
func (t *tour) minorityDown(ctx context.Context) error {
	k := (t.n - 1) / 2
	verb := "crash"
	if k == 1 {
		verb = "crashes"
	}
	t.step(3, "%d of the %d etcd members %s; locks are still granted; the crashed come back", k, t.n, verb)
	leader, err := t.cluster.WaitLeader(ctx)
	if err != nil {
		return err
	}
	var victims []*embedtest.Member
	for _, m := range t.cluster.Members() {
		if m != leader && len(victims) < k {
			victims = append(victims, m)
		}
	}
	dave, err := t.newWorker(ctx, "dave", false)
	if err != nil {
		return err
	}
	defer dave.close()
	held, err := etcdlock.NewMutex(dave.s, dailyLock).Lock(ctx)
	if err != nil {
		return err
	}
	t.granted(dailyLock, held.Token(), false)
	t.say("dave", held.Token(), "holds %s", dailyLock)
	for _, m := range victims {
		if err := m.Kill(); err != nil {
			return err
		}
		t.say("etcd", 0, "%s crashes", m.Name())
	}
	t.say("etcd", 0, "%d of %d members left: still a majority", t.n-k, t.n)
	time.Sleep(t.cfg.ttl)
	if err := held.Context().Err(); err != nil {
		return t.fail("dave lost his lock when a minority of members crashed: %v", context.Cause(held.Context()))
	}
	t.say("dave", held.Token(), "still holds it a TTL later (its session is valid until %+.1fs): a minority crash costs no lock",
		dave.s.ValidUntil().Sub(t.start).Seconds())
	if err := held.Unlock(ctx); err != nil {
		return err
	}
	t.say("dave", held.Token(), "unlocks, then locks and unlocks again")
	for i := 0; i < 3; i++ {
		start := time.Now()
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := etcdlock.NewMutex(dave.s, dailyLock).Lock(lctx)
		cancel()
		if err != nil {
			return t.fail("no grant within 10s with %d of %d members down: %v", k, t.n, err)
		}
		d := time.Since(start)
		t.granted(dailyLock, l.Token(), false)
		t.degraded++
		t.degradedSlow = max(t.degradedSlow, d)
		t.say("dave", l.Token(), "gets %s in %dms", dailyLock, d.Milliseconds())
		if err := l.Unlock(ctx); err != nil {
			return err
		}
	}
	for _, m := range victims {
		if err := m.Restart(); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := m.WaitReady(wctx)
		cancel()
		if err != nil {
			return err
		}
		t.say("etcd", 0, "%s restarted from its data and rejoined", m.Name())
	}
	return nil
}

// leaderDown is step 4: a worker locks and unlocks in a loop while the etcd
// leader crashes; the grants pause for the election and continue.
func (t *tour) leaderDown(ctx context.Context) error {
	t.step(4, "The etcd leader crashes while a worker locks and unlocks in a loop")
	erin, err := t.newWorker(ctx, "erin", false)
	if err != nil {
		return err
	}
	defer erin.close()

	var (
		mu    sync.Mutex
		times []time.Time
	)
	count := func() (int, time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if len(times) == 0 {
			return 0, time.Time{}
		}
		return len(times), times[len(times)-1]
	}
	lctx, stop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		t.lockLoop(lctx, erin, func(at time.Time) {
			mu.Lock()
			times = append(times, at)
			mu.Unlock()
		})
	}()
	defer func() {
		stop()
		<-loopDone
	}()

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n, _ := count(); n >= 10 {
			break
		}
		if time.Now().After(deadline) {
			return t.fail("fewer than 10 grants of a free lock in 10s")
		}
	}
	n, _ := count()
	t.say("erin", 0, "locks and unlocks %q in a loop: %d grants so far", hourlyLock, n)

	leader, err := t.cluster.WaitLeader(ctx)
	if err != nil {
		return err
	}
	if err := leader.Kill(); err != nil {
		return err
	}
	killedAt := time.Now()
	t.say("etcd", 0, "%s, the raft leader, crashes (no hand-off)", leader.Name())
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	nl, err := t.cluster.WaitLeader(wctx)
	cancel()
	if err != nil {
		return t.fail("no new etcd leader within 20s of the leader's crash")
	}
	t.etcdElection = time.Since(killedAt)
	t.say("etcd", 0, "%s is the new leader, %.1fs after the crash", nl.Name(), t.etcdElection.Seconds())

	// Grants must resume: wait for one after the crash, then a little more.
	bound := 2*t.cfg.ttl + 10*time.Second
	for {
		if _, last := count(); last.After(killedAt) {
			break
		}
		if time.Since(killedAt) > bound {
			return t.fail("no grant within %v of the etcd leader's crash", bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	stop()
	<-loopDone

	mu.Lock()
	var gaps []time.Duration
	var around time.Duration
	after := 0
	for i := 1; i < len(times); i++ {
		g := times[i].Sub(times[i-1])
		gaps = append(gaps, g)
		if !times[i-1].After(killedAt) && times[i].After(killedAt) {
			around = g
		}
		if times[i].After(killedAt) {
			after++
		}
	}
	mu.Unlock()
	slices.Sort(gaps)
	t.leaderGap, t.afterKill = around, after
	if len(gaps) > 0 {
		t.normalGap = gaps[len(gaps)/2]
	}
	t.say("erin", 0, "grants paused %.1fs around the crash (normally one every %dms), then continued: %d grants after it",
		around.Seconds(), t.normalGap.Milliseconds(), after)
	if around > t.etcdElection+2*time.Second {
		t.say("why", 0, "longer than the election: a request caught in flight by the crash gets no answer; the library gives each attempt 2s, then retries it (etcd itself would wait 5s + 2 election timeouts)")
	}

	if err := leader.Restart(); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = leader.WaitReady(rctx)
	cancel()
	if err != nil {
		return err
	}
	t.say("etcd", 0, "%s restarted and rejoined as a follower", leader.Name())
	return nil
}

// lockLoop locks and unlocks hourlyLock until ctx ends, calling granted
// with the time of every grant. A session lost to its own validity clock
// (etcd's election can outlast a short TTL's keepalive slack) is replaced.
func (t *tour) lockLoop(ctx context.Context, w *worker, granted func(time.Time)) {
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		l, err := etcdlock.NewMutex(w.s, hourlyLock).Lock(actx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, etcdlock.ErrSessionExpired) {
				t.mu.Lock()
				t.sessionsLost++
				t.mu.Unlock()
				t.say(w.name, 0, "its session ran out while etcd elected a leader (no keepalive acknowledged for a TTL); opens a new one")
				_ = w.s.Close()
				for ctx.Err() == nil {
					s, err := t.newSession(ctx, w)
					if err == nil {
						w.s = s
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				continue
			}
			t.say(w.name, 0, "Lock: %v; retrying", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		at := time.Now()
		t.granted(hourlyLock, l.Token(), false)
		granted(at)
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = l.Unlock(uctx) // a canceled Unlock still frees the lock (the reaper finishes it)
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(40 * time.Millisecond):
		}
	}
}

// term is one term of leadership in step 5.
type term struct {
	name string
	tok  etcdlock.Token
	at   time.Time
}

// election is step 5: three replicas run Election.Run; the leader crashes;
// another takes over; then a leader is redeployed and hands over at once.
func (t *tour) election(ctx context.Context) error {
	t.step(5, "Leader election: three replicas run Election.Run; the leader crashes; an observer prints each change")
	obs, err := t.newWorker(ctx, "observer", false)
	if err != nil {
		return err
	}
	defer obs.close()
	octx, stopObs := context.WithCancel(ctx)
	var (
		omu  sync.Mutex
		seen etcdlock.LeaderInfo
	)
	ch := etcdlock.NewElection(obs.s, leaderName).Observe(octx)
	obsDone := make(chan struct{})
	go func() {
		defer close(obsDone)
		for info := range ch {
			omu.Lock()
			seen = info
			omu.Unlock()
			if info.Key == "" {
				t.say("observer", 0, "no leader")
			} else {
				t.say("observer", info.Token, "leader is %s", info.Value)
			}
		}
	}()
	defer func() {
		stopObs()
		<-obsDone
	}()
	observed := func(tok etcdlock.Token) error {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			omu.Lock()
			got := seen.Token
			omu.Unlock()
			if got == tok {
				return nil
			}
			if time.Now().After(deadline) {
				return t.fail("Observe did not report the leader with token %d within 5s (it shows %d)", tok, got)
			}
		}
	}

	terms := make(chan term, 16)
	type replica struct {
		w      *worker
		cancel context.CancelFunc
		done   chan error
	}
	replicas := map[string]*replica{}
	var order []string
	defer func() {
		for _, name := range order {
			r := replicas[name]
			r.cancel()
			<-r.done
			r.w.close()
		}
	}()
	for i := 1; i <= 3; i++ {
		w, err := t.newWorker(ctx, fmt.Sprintf("replica-%d", i), false)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithCancel(ctx)
		r := &replica{w: w, cancel: cancel, done: make(chan error, 1)}
		replicas[w.name], order = r, append(order, w.name)
		go func() {
			r.done <- etcdlock.NewElection(w.s, leaderName).Run(rctx, w.name, func(lctx context.Context) error {
				l, _ := etcdlock.LeadershipFromContext(lctx)
				t.say(w.name, l.Token(), "leads: Run called lead")
				at := time.Now()
				// The leader's writes carry its token. A rejection is a
				// broken promise only while this term is still current.
				admitted, err := t.tryWrite(lctx, w.name, "reports/summary", l.Token(), w.name+" was here")
				// The term is reported after its first write, so that the
				// crashed leader's late write (below) comes after it.
				terms <- term{w.name, l.Token(), at}
				switch {
				case err != nil && lctx.Err() == nil:
					return err
				case !admitted && err == nil && lctx.Err() == nil:
					return t.fail("the store rejected the write of the current leader %s (token %d)", w.name, l.Token())
				}
				<-lctx.Done()
				t.say(w.name, l.Token(), "lead's context ended: %v", context.Cause(lctx))
				return nil
			})
		}()
	}

	nextTerm := func(after time.Time, bound time.Duration, what string) (term, error) {
		select {
		case tm := <-terms:
			t.granted(leaderName, tm.tok, true)
			return tm, nil
		case <-time.After(time.Until(after.Add(bound))):
			return term{}, t.fail("no new leader within %v after %s", bound, what)
		case <-ctx.Done():
			return term{}, ctx.Err()
		}
	}
	first, err := nextTerm(time.Now(), 10*time.Second, "the replicas started")
	if err != nil {
		return err
	}
	if err := observed(first.tok); err != nil {
		return err
	}

	crashed := replicas[first.name]
	t.say(first.name, first.tok, "CRASHES: its process dies without resigning (client closed); its lease must expire (TTL %v)", t.cfg.ttl)
	crashedAt := time.Now()
	_ = crashed.w.cli.Close()
	second, err := nextTerm(crashedAt, t.cfg.ttl+3*time.Second, "the leader crashed")
	if err != nil {
		return err
	}
	t.crashedFree = second.at.Sub(crashedAt)
	t.say(second.name, second.tok, "took over %.1fs after the crash", t.crashedFree.Seconds())
	if err := <-crashed.done; errors.Is(err, etcdlock.ErrSessionExpired) {
		t.say(first.name, first.tok, "Run returned: %v", err)
	} else {
		return t.fail("Run of a replica whose client closed returned %v, want ErrSessionExpired", err)
	}
	crashed.done <- nil // for the deferred cleanup
	if err := t.write(ctx, first.name, "reports/summary", first.tok, first.name+" (had it only been paused)", mustReject); err != nil {
		return err
	}
	if err := observed(second.tok); err != nil {
		return err
	}

	deployed := replicas[second.name]
	deployed.cancel()
	deployedAt := time.Now()
	t.say(second.name, second.tok, "is redeployed: its Run's context ends; Run waits for lead to return, then resigns")
	third, err := nextTerm(deployedAt, t.cfg.ttl+3*time.Second, "the leader resigned")
	if err != nil {
		return err
	}
	t.handover = third.at.Sub(deployedAt)
	t.say(third.name, third.tok, "took over %dms after the resign: no TTL to wait for", t.handover.Milliseconds())
	if err := <-deployed.done; err != nil {
		return t.fail("Run of a redeployed replica returned %v, want nil", err)
	}
	deployed.done <- nil
	return observed(third.tok)
}
