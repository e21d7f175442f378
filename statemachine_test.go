package etcdlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

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
		t.Run(kind, func(t *testing.T) {
			runStateMachine(t, kind, rand.New(rand.NewPCG(seed, 7)), 200)
		})
	}
}

type smAcq struct {
	id      int
	session int
	write   bool // rwmutex: a writer
	cancel  context.CancelFunc
	done    chan error // Acquire's result
	lock    *Lock
	granted bool
}

func runStateMachine(t *testing.T, kind string, rng *rand.Rand, steps int) {
	cli := newClient(t, nil)
	name := uniqueName(t)
	ctx := testCtx(t, 5*time.Minute)
	// Session 0 reaches etcd through link only.
	link, err := shared.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	cfg := shared.ClientConfig()
	cfg.Endpoints = link.Endpoints()
	linkCli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = linkCli.Close() })
	sessions := make([]*Session, 4)
	newSession := func(i int) *Session {
		if i == 0 {
			return openSession(t, linkCli)
		}
		return openSession(t, cli)
	}
	for i := range sessions {
		sessions[i] = newSession(i)
	}
	acquire := func(ctx context.Context, s *Session, write bool) (*Lock, error) {
		switch {
		case kind == "semaphore":
			return NewSemaphore(s, name, 2).Acquire(ctx)
		case write:
			return NewRWMutex(s, name).Lock(ctx)
		}
		return NewRWMutex(s, name).RLock(ctx)
	}
	var queue []*smAcq // the model: live acquisitions in enqueue order
	nextID := 0
	holders := func() []*smAcq { // who the model says holds
		if kind == "semaphore" {
			return queue[:min(2, len(queue))]
		}
		if len(queue) == 0 {
			return nil
		}
		if queue[0].write {
			return queue[:1]
		}
		n := 0
		for n < len(queue) && !queue[n].write {
			n++
		}
		return queue[:n]
	}
	remove := func(a *smAcq) { queue = slices.DeleteFunc(queue, func(b *smAcq) bool { return b == a }) }

	var lastSeen string // etcd's last state that disagreed with the model
	defer func() {
		if t.Failed() && lastSeen != "" {
			t.Logf("etcd's last state: %s", lastSeen)
		}
	}()
	for step := 0; step < steps; step++ {
		op := rng.IntN(10)
		var what string
		switch {
		case op < 5 || len(queue) == 0: // acquire
			a := &smAcq{id: nextID, session: rng.IntN(len(sessions)), write: rng.IntN(3) == 0, done: make(chan error, 1)}
			nextID++
			actx, cancel := context.WithCancel(ctx)
			a.cancel = cancel
			s := sessions[a.session]
			before := len(keysUnder(t, cli, name))
			go func() {
				l, err := acquire(actx, s, a.write)
				a.lock = l
				a.done <- err
			}()
			waitFor(t, 10*time.Second, fmt.Sprintf("the acquisition #%d (session %d) to queue at step %d", a.id, a.session, step), func() bool { return len(keysUnder(t, cli, name)) > before })
			queue = append(queue, a)
			what = fmt.Sprintf("acquire #%d (session %d, write %v)", a.id, a.session, a.write)
		case op < 7: // release a holder
			hs := holders()
			var granted []*smAcq
			for _, h := range hs {
				if h.granted {
					granted = append(granted, h)
				}
			}
			if len(granted) == 0 {
				continue
			}
			h := granted[rng.IntN(len(granted))]
			if err := h.lock.Unlock(ctx); err != nil {
				t.Fatalf("step %d: unlock #%d: %v", step, h.id, err)
			}
			remove(h)
			what = fmt.Sprintf("release #%d", h.id)
		case op < 9: // cancel a waiter
			var waiting []*smAcq
			for _, a := range queue[len(holders()):] {
				waiting = append(waiting, a)
			}
			if len(waiting) == 0 {
				continue
			}
			a := waiting[rng.IntN(len(waiting))]
			a.cancel()
			if err := <-a.done; err == nil {
				// It was granted just before the cancel: release it.
				a.granted = true
				_ = a.lock.Unlock(ctx)
			}
			remove(a)
			what = fmt.Sprintf("cancel #%d", a.id)
		case op == 9 && rng.IntN(2) == 0: // kill a session: its lease is revoked from outside
			i := rng.IntN(len(sessions))
			if _, err := cli.Revoke(ctx, sessions[i].Lease()); err != nil {
				t.Fatal(err)
			}
			for _, a := range slices.Clone(queue) {
				if a.session == i {
					if !a.granted {
						if err := <-a.done; err == nil {
							a.granted = true
						}
					}
					remove(a)
				}
			}
			sessions[i] = newSession(i)
			what = fmt.Sprintf("kill session %d", i)
		default: // delay-then-deliver: session 0 gives up on a held request
			var mine []*smAcq
			for _, h := range holders() {
				if h.granted && h.session == 0 {
					mine = append(mine, h)
				}
			}
			link.Hold()
			gctx, cancel := context.WithTimeout(ctx, time.Second)
			if len(mine) > 0 && rng.IntN(2) == 0 {
				// A release that times out: the session's reaper deletes the key.
				h := mine[rng.IntN(len(mine))]
				err := h.lock.Unlock(gctx)
				remove(h)
				what = fmt.Sprintf("release #%d through a held link (%v), delivered late", h.id, err)
			} else {
				// An acquisition that times out: it must neither hold nor wait.
				write := rng.IntN(3) == 0
				l, err := acquire(gctx, sessions[0], write)
				if err == nil {
					t.Fatalf("step %d: acquisition through a held link granted (token %d)", step, l.Token())
				}
				what = fmt.Sprintf("acquire (write %v) through a held link, given up (%v), delivered late", write, err)
			}
			cancel()
			link.Restore()
			// The request is served now, perhaps after the reaper raised
			// the session's barrier (then it writes nothing) or before (then
			// the reaper's read finds and deletes it). Until the reaper is
			// done, etcd may still change.
			s0 := sessions[0]
			waitFor(t, 30*time.Second, fmt.Sprintf("session 0's reaper after step %d (%s)", step, what), func() bool {
				return s0.reaper.idle()
			})
		}
		// Invariants: exactly the model's holders hold, in etcd and for their callers.
		want := holders()
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
		for _, a := range queue[len(want):] {
			select {
			case err := <-a.done:
				t.Fatalf("step %d (%s): #%d returned (%v) while the model says it waits", step, what, a.id, err)
			default:
			}
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("etcd to agree with the model after step %d (%s)", step, what), func() bool {
			st, err := Describe(ctx, cli, name)
			if err != nil || len(st.Holders) != len(want) || len(st.Waiters) != len(queue)-len(want) {
				lastSeen = fmt.Sprintf("%+v (err %v); the model: %d holders, %d waiters", st, err, len(want), len(queue)-len(want))
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
	for _, a := range queue {
		a.cancel()
		if a.granted {
			_ = a.lock.Unlock(ctx)
		}
	}
}
