package etcdlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRandomStateMachine drives a Semaphore of 2 and an RWMutex through 200
// random steps each (acquire, release, cancel a waiter, kill a session, and
// a delay-then-deliver fault: an acquisition or a release that session 0,
// which reaches etcd through an embedtest Link, gives up on while the link
// holds its bytes, delivered when the link is restored) against real etcd, and after every step checks that exactly the
// acquisitions a model says should hold do hold, in etcd and as reported to
// their callers. The seed is logged; set ETCDLOCK_SEED to replay a run.
func TestRandomStateMachine(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("ETCDLOCK_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (ETCDLOCK_SEED=%d to replay)", seed, seed)
	for _, kind := range []string{"semaphore", "rwmutex"} {
		for _, mode := range []struct {
			name string
			opts []etcdlock.SessionOption
		}{{"batching", nil}, {"unbatched", []etcdlock.SessionOption{etcdlock.WithoutBatching()}}} {
			t.Run(kind+"/"+mode.name, func(t *testing.T) {
				t.Parallel() // its own sessions, link and name; most of a step is waiting for etcd
				runStateMachine(t, kind, rand.New(rand.NewPCG(seed, 7)), 200, mode.opts...)
			})
		}
	}
}

type smAcq struct {
	id      int
	session int
	write   bool // rwmutex: a writer
	cancel  context.CancelFunc
	done    chan error // Acquire's result
	lock    *etcdlock.Lock
	granted bool
}

// smRun is one run of the state machine: the lock, its sessions, and the
// model.
type smRun struct {
	t        *testing.T
	kind     string
	opts     []etcdlock.SessionOption // of every session: batching or not
	name     string
	ctx      context.Context
	rng      *rand.Rand
	cli      *clientv3.Client
	linkCli  *clientv3.Client // session 0's client, through link
	link     *embedtest.Link
	sessions []*etcdlock.Session
	queue    []*smAcq // the model: live acquisitions in enqueue order
	nextID   int
	lastSeen string // etcd's last state that disagreed with the model
}

func runStateMachine(t *testing.T, kind string, rng *rand.Rand, steps int, opts ...etcdlock.SessionOption) {
	r := newSMRun(t, kind, rng, opts)
	defer func() {
		if t.Failed() && r.lastSeen != "" {
			t.Logf("etcd's last state: %s", r.lastSeen)
		}
	}()
	for step := 0; step < steps; step++ {
		what, ok := r.step(step)
		if !ok {
			continue
		}
		r.checkInvariants(step, what)
	}
	for _, a := range r.queue {
		a.cancel()
		if a.granted {
			_ = a.lock.Unlock(r.ctx)
		}
	}
}

// newSMRun opens the run's 4 sessions; session 0 reaches etcd through a
// link only.
func newSMRun(t *testing.T, kind string, rng *rand.Rand, opts []etcdlock.SessionOption) *smRun {
	r := &smRun{t: t, kind: kind, rng: rng, opts: opts, cli: shared.TestClient(t), name: embedtest.UniqueName(t, "test"), ctx: embedtest.Context(t, 5*time.Minute)}
	link, err := shared.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	r.link = link
	cfg := shared.ClientConfig()
	cfg.Endpoints = link.Endpoints()
	linkCli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = linkCli.Close() })
	r.linkCli = linkCli
	r.sessions = make([]*etcdlock.Session, 4)
	for i := range r.sessions {
		r.sessions[i] = r.newSession(i)
	}
	return r
}

func (r *smRun) newSession(i int) *etcdlock.Session {
	if i == 0 {
		return locktest.OpenSession(r.t, r.linkCli, r.opts...)
	}
	return locktest.OpenSession(r.t, r.cli, r.opts...)
}

func (r *smRun) acquire(ctx context.Context, s *etcdlock.Session, write bool) (*etcdlock.Lock, error) {
	switch {
	case r.kind == "semaphore":
		return etcdlock.NewSemaphore(s, r.name, 2).Acquire(ctx)
	case write:
		return etcdlock.NewRWMutex(s, r.name).Lock(ctx)
	}
	return etcdlock.NewRWMutex(s, r.name).RLock(ctx)
}

// holders returns who the model says holds.
func (r *smRun) holders() []*smAcq {
	if r.kind == "semaphore" {
		return r.queue[:min(2, len(r.queue))]
	}
	if len(r.queue) == 0 {
		return nil
	}
	if r.queue[0].write {
		return r.queue[:1]
	}
	n := 0
	for n < len(r.queue) && !r.queue[n].write {
		n++
	}
	return r.queue[:n]
}

func (r *smRun) remove(a *smAcq) {
	r.queue = slices.DeleteFunc(r.queue, func(b *smAcq) bool { return b == a })
}

// step takes one random step and describes it; false when there was
// nothing to do (no invariant check then).
func (r *smRun) step(step int) (string, bool) {
	op := r.rng.IntN(10)
	switch {
	case op < 5 || len(r.queue) == 0:
		return r.stepAcquire(step), true
	case op < 7:
		return r.stepRelease(step)
	case op < 9:
		return r.stepCancel()
	case op == 9 && r.rng.IntN(2) == 0:
		return r.stepKill(), true
	default:
		return r.stepDelayThenDeliver(step), true
	}
}

// stepAcquire starts an acquisition and waits for it to queue.
func (r *smRun) stepAcquire(step int) string {
	a := &smAcq{id: r.nextID, session: r.rng.IntN(len(r.sessions)), write: r.rng.IntN(3) == 0, done: make(chan error, 1)}
	r.nextID++
	actx, cancel := context.WithCancel(r.ctx)
	a.cancel = cancel
	s := r.sessions[a.session]
	before := len(keysUnder(r.t, r.cli, r.name))
	go func() {
		l, err := r.acquire(actx, s, a.write)
		a.lock = l
		a.done <- err
	}()
	waitFor(r.t, 10*time.Second, fmt.Sprintf("the acquisition #%d (session %d) to queue at step %d", a.id, a.session, step), func() bool { return len(keysUnder(r.t, r.cli, r.name)) > before })
	r.queue = append(r.queue, a)
	return fmt.Sprintf("acquire #%d (session %d, write %v)", a.id, a.session, a.write)
}

// stepRelease releases a granted holder.
func (r *smRun) stepRelease(step int) (string, bool) {
	var granted []*smAcq
	for _, h := range r.holders() {
		if h.granted {
			granted = append(granted, h)
		}
	}
	if len(granted) == 0 {
		return "", false
	}
	h := granted[r.rng.IntN(len(granted))]
	if err := h.lock.Unlock(r.ctx); err != nil {
		r.t.Fatalf("step %d: unlock #%d: %v", step, h.id, err)
	}
	r.remove(h)
	return fmt.Sprintf("release #%d", h.id), true
}

// stepCancel cancels a waiter.
func (r *smRun) stepCancel() (string, bool) {
	var waiting []*smAcq
	for _, a := range r.queue[len(r.holders()):] {
		waiting = append(waiting, a)
	}
	if len(waiting) == 0 {
		return "", false
	}
	a := waiting[r.rng.IntN(len(waiting))]
	a.cancel()
	if err := <-a.done; err == nil {
		// It was granted just before the cancel: release it.
		a.granted = true
		_ = a.lock.Unlock(r.ctx)
	}
	r.remove(a)
	return fmt.Sprintf("cancel #%d", a.id), true
}

// stepKill kills a session: its lease is revoked from outside.
func (r *smRun) stepKill() string {
	i := r.rng.IntN(len(r.sessions))
	if _, err := r.cli.Revoke(r.ctx, r.sessions[i].Lease()); err != nil {
		r.t.Fatal(err)
	}
	for _, a := range slices.Clone(r.queue) {
		if a.session == i {
			if !a.granted {
				if err := <-a.done; err == nil {
					a.granted = true
				}
			}
			r.remove(a)
		}
	}
	r.sessions[i] = r.newSession(i)
	return fmt.Sprintf("kill session %d", i)
}

// stepDelayThenDeliver: session 0 gives up on a held request.
func (r *smRun) stepDelayThenDeliver(step int) string {
	var mine []*smAcq
	for _, h := range r.holders() {
		if h.granted && h.session == 0 {
			mine = append(mine, h)
		}
	}
	r.link.Hold()
	gctx, cancel := context.WithTimeout(r.ctx, time.Second)
	var what string
	if len(mine) > 0 && r.rng.IntN(2) == 0 {
		// A release that times out: the session's reaper deletes the key.
		h := mine[r.rng.IntN(len(mine))]
		err := h.lock.Unlock(gctx)
		r.remove(h)
		what = fmt.Sprintf("release #%d through a held link (%v), delivered late", h.id, err)
	} else {
		// An acquisition that times out: it must neither hold nor wait.
		write := r.rng.IntN(3) == 0
		l, err := r.acquire(gctx, r.sessions[0], write)
		if err == nil {
			r.t.Fatalf("step %d: acquisition through a held link granted (token %d)", step, l.Token())
		}
		what = fmt.Sprintf("acquire (write %v) through a held link, given up (%v), delivered late", write, err)
	}
	cancel()
	r.link.Restore()
	// The request is served now, perhaps after the reaper raised
	// the session's barrier (then it writes nothing) or before (then
	// the reaper's read finds and deletes it). Until the reaper is
	// done, etcd may still change.
	s0 := r.sessions[0]
	waitFor(r.t, 30*time.Second, fmt.Sprintf("session 0's reaper after step %d (%s)", step, what), func() bool {
		return testhook.ReaperIdle(s0)
	})
	return what
}

// checkInvariants: exactly the model's holders hold, in etcd and for their
// callers.
func (r *smRun) checkInvariants(step int, what string) {
	t := r.t
	want := r.holders()
	for _, h := range want {
		if !h.granted {
			select {
			case err := <-h.done:
				if err != nil {
					t.Fatalf("step %d (%s): #%d failed: %v", step, what, h.id, err)
				}
				h.granted = true
			case <-time.After(10 * time.Second):
				t.Fatalf("step %d (%s): #%d should hold but was not granted", step, what, h.id)
			}
		}
	}
	for _, a := range r.queue[len(want):] {
		select {
		case err := <-a.done:
			t.Fatalf("step %d (%s): #%d returned (%v) while the model says it waits", step, what, a.id, err)
		default:
		}
	}
	waitFor(t, 10*time.Second, fmt.Sprintf("etcd to agree with the model after step %d (%s)", step, what), func() bool {
		st, err := etcdlock.Describe(r.ctx, r.cli, r.name)
		if err != nil || len(st.Holders) != len(want) || len(st.Waiters) != len(r.queue)-len(want) {
			r.lastSeen = fmt.Sprintf("%+v (err %v); the model: %d holders, %d waiters", st, err, len(want), len(r.queue)-len(want))
			return false
		}
		for i, h := range want {
			if st.Holders[i].Token != h.lock.Token() {
				return false
			}
		}
		return true
	})
}
