//go:build linux

package safety

// The sharded cell's workers: goroutines of the test, each with its own
// root client and Shards, reaching every member through the links, and one
// sharded session for its life. Each iteration locks one of the names,
// increments its Register (read, then write read+1, with the grant's
// token) and unlocks, recording what it saw as the worker processes of the
// other cells report it.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// shardCounts are the sharded cell's figures.
type shardCounts struct {
	acked, failed, unknown, staleReads, staleWrites, readErrs int
	grants, lockErrors, lockLost                              int
	holds, cuts                                               int
	revokes, revokeScenarios, revokedHeld                     int
	moves                                                     map[string]int // "<action> <outcome>"
	phases                                                    map[string]int // progress phases seen
	members                                                   counts         // the member lanes'
}

func (n shardCounts) String() string {
	return fmt.Sprintf("ops acknowledged=%d failed=%d unknown=%d | grants=%d lock errors=%d (lock lost %d) | "+
		"link holds=%d cuts=%d | leases revoked=%d (targeted %d, next holder read %d) | "+
		"member crashes=%d (leader %d, 2-of-3-down %d) isolations=%d compactions=%d | stale writes rejected=%d stale reads rejected=%d | "+
		"mover: %v | phases: %v",
		n.acked, n.failed, n.unknown, n.grants, n.lockErrors, n.lockLost, n.holds, n.cuts,
		n.revokes, n.revokeScenarios, n.revokedHeld, n.members.memberCrashes, n.members.leaderCrashes, n.members.twoDown,
		n.members.isolations, n.members.compactions, n.staleWrites, n.staleReads, n.moves, n.phases)
}

// shardWorker is one in-process worker.
type shardWorker struct {
	sc   *shardCell
	id   int
	sess *shard.Session
	res  map[string]*httpRegister
}

// worker runs one worker until the cell stops it.
func (sc *shardCell) worker(ctx context.Context) {
	sc.mu.Lock()
	sc.nextClient++
	w := &shardWorker{sc: sc, id: sc.nextClient, res: map[string]*httpRegister{}}
	sc.mu.Unlock()
	for _, name := range shardNames {
		w.res[name] = &httpRegister{url: sc.urls[name], c: &http.Client{Timeout: opTimeout}}
	}
	root, err := clientv3.New(workerClientConfig(sc.workerEndpoints(sc.ids[0]), roleRegister))
	if err != nil {
		sc.errorf("worker %d: root client: %v", w.id, err)
		return
	}
	defer root.Close()
	dial := func(_ context.Context, id string, _ []string) (*clientv3.Client, error) {
		return clientv3.New(workerClientConfig(sc.workerEndpoints(id), roleRegister))
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	shards, err := shard.New(sctx, root, shard.WithDialer(dial))
	cancel()
	if err != nil {
		sc.errorf("worker %d: shards: %v", w.id, err)
		return
	}
	defer shards.Close()
	w.sess, err = shard.NewSession(ctx, shards, etcdlock.WithTTL(sessionTTL),
		etcdlock.WithIdentity(fmt.Sprintf("sharded-worker-%d", w.id)))
	if err != nil {
		sc.errorf("worker %d: session: %v", w.id, err)
		return
	}
	defer w.sess.Close()
	for ctx.Err() == nil && !sc.isStopping() {
		w.iteration(ctx, shardNames[sc.randN(len(shardNames))])
	}
}

func (sc *shardCell) isStopping() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.stopping
}

// iteration locks name (no timeout: a Lock fails only with its session),
// increments its register and unlocks.
func (w *shardWorker) iteration(ctx context.Context, name string) {
	sc := w.sc
	l, err := w.sess.NewMutex(name).Lock(ctx)
	if err != nil {
		sc.mu.Lock()
		sc.n.lockErrors++
		if errors.Is(err, etcdlock.ErrLockLost) {
			sc.n.lockLost++
		}
		sc.mu.Unlock()
		sleepCtx(ctx, 50*time.Millisecond) // a backoff, as a client's
		return
	}
	g := Grant{Client: w.id, Token: l.Token(), Key: l.Key(), At: monoNow()}
	w.incr(ctx, name, l)
	g.Released = monoNow()
	sc.mu.Lock()
	sc.grants[name] = append(sc.grants[name], g)
	sc.n.grants++
	sc.mu.Unlock()
	uctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	_ = l.Unlock(uctx)
	cancel()
}

// incr reads name's register with l's token and writes read+1 with it.
// Now and then it dawdles between the two, so that grants span moves and
// faults; a targeted revocation holds it there (see revokeScenario).
func (w *shardWorker) incr(ctx context.Context, name string, l *etcdlock.Lock) {
	sc, res, tok := w.sc, w.res[name], l.Token()
	rc := monoNow()
	v, st := res.read(ctx, l)
	rr := monoNow()
	if st != "ok" {
		sc.mu.Lock()
		sc.n.failed++
		if st == "stale" {
			sc.n.staleReads++
		} else {
			sc.n.readErrs++
		}
		sc.mu.Unlock()
		return
	}
	sc.noteRead(name, tok)
	s := sc.victim(w.id, name, l)
	if s != nil {
		<-s.release
	} else if sc.randN(4) == 0 {
		sleepCtx(ctx, sc.randDur(0, 300*time.Millisecond)) // a slow holder, not a synchronisation
	}
	wc := monoNow()
	st = res.write(context.Background(), l, v+1)
	op := Op{Client: w.id, Token: tok, ReadCall: rc, ReadReturn: rr, Value: v, WriteCall: wc, WriteReturn: monoNow()}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch st {
	case "ok":
		op.Outcome = Acked
		sc.n.acked++
	case "stale":
		op.Outcome = Rejected
		sc.n.failed++
		sc.n.staleWrites++
	default:
		op.Outcome = Unknown
		sc.n.unknown++
	}
	sc.ops[name] = append(sc.ops[name], op)
	if s != nil {
		sc.endScenario(s, st)
	}
}

// linkLane holds or cuts the workers' links to one or two members of a
// cluster (the leader's half of the time) for 1-6 s, then restores them.
func (sc *shardCell) linkLane(ctx context.Context) {
	for sleepCtx(ctx, sc.randDur(time.Second, 3*time.Second)) {
		id := sc.ids[sc.randN(len(sc.ids))]
		held := sc.subs[id].holdTargets()
		if len(held) > 2 {
			held = held[:2]
		}
		cut := sc.randN(2) == 0
		for _, i := range held {
			if cut {
				sc.links[id][i].Cut()
			} else {
				sc.links[id][i].Hold()
			}
		}
		sc.mu.Lock()
		if cut {
			sc.n.cuts++
		} else {
			sc.n.holds++
		}
		sc.mu.Unlock()
		sleepCtx(ctx, sc.randDur(time.Second, 6*time.Second))
		for _, i := range held {
			sc.links[id][i].Restore()
		}
	}
}
