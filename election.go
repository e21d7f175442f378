package etcdlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/wire"
)

// Election elects one leader among the candidates of a name, in the order
// they campaigned, on the same queue as Mutex. The leader carries a value
// (an address, say) that others read with Leader or Observe. An Election is
// safe for concurrent use; every Campaign call is its own candidacy.
//
// Leadership, like a lock, lives as long as the session's lease: a leader
// paused past its lease may wake believing it still leads. Pass
// Leadership.Token with every write the leader makes and have the resource
// check it (Fence), or make etcd writes conditional on Leadership.Guard.
type Election struct {
	s      *Session
	name   string
	health atomic.Pointer[LeaderHealth] // set by NewLeaderHealth, for Run
}

// LeaderInfo describes the current leader. The zero LeaderInfo means "no
// leader" (Observe).
type LeaderInfo struct {
	Value    string
	Token    Token
	Key      string
	Identity string
	Lease    clientv3.LeaseID
}

// NewElection returns the election called name on session s. It does not talk
// to etcd; an invalid name or a nil session is reported by its methods.
func NewElection(s *Session, name string) *Election { return &Election{s: s, name: name} }

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

func (e *Election) queue(verb string) (queue, error) {
	return newQueue(e.s, e.name, tagElection, verb)
}

// Campaign joins the candidates (first come, first served) and returns once
// this candidacy leads, with value as the leader's value. It never returns a
// Leadership whose key did not exist at the revision that made it leader. It
// returns an error wrapping ctx's error when ctx ends first, ErrSessionExpired
// (or ErrSessionClosed) when the session is lost, ErrLockLost when the
// candidate's key is deleted while it waits, ErrKindMismatch when the name is
// used by another kind of recipe, and ErrInvalidName or ErrInvalidArgument
// for bad input; it leaves no key behind then.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	return acquisition(ctx, e.s, e.name, tagElection, "campaign", false, func(q queue) (*Leadership, error) {
		w, err := q.acquire(ctx, value, exclusive{})
		if err != nil {
			return nil, err
		}
		l := &Leadership{g: Lock{w: w}}
		if !w.sk.uncertain {
			l.mod = w.rev // the enqueue wrote the key then, with its value
		}
		return l, nil
	})
}

// Leader returns the current leader, read on the session's cluster (on a
// shard.Session's election, the cluster the map gives the name's slot: during a
// move, the source, whose leader leads until its term ends in the drain).
// It returns an error wrapping:
//
//   - ErrNoLeader when nobody leads;
//   - ErrSlotMoving, for an election of a shard.Session, instead of ErrNoLeader when
//     nobody leads there but the slot is not settled there (a move of it
//     is recorded, or its stamp there is not active): whether anybody
//     leads cannot be known until the move ends;
//   - ErrKindMismatch when the name is used by another kind of recipe;
//   - ErrInvalidName or ErrInvalidArgument for bad input;
//   - the read's error otherwise.
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	q, err := e.queue("leader")
	if err != nil {
		return LeaderInfo{}, err
	}
	if q.s, _, err = e.s.routeRead(ctx, e.name); err != nil {
		return LeaderInfo{}, q.errorf(err)
	}
	lr, err := q.leader(ctx, q.s.cli, 0)
	switch {
	case err != nil:
		return LeaderInfo{}, q.errorf(ctxErr(ctx, err))
	case lr.info != LeaderInfo{}:
		return lr.info, nil
	case !lr.settled:
		return LeaderInfo{}, q.errorf(fmt.Errorf("%w: nobody leads on cluster %s, but slot %d is moving or not active there",
			ErrSlotMoving, q.s.stamps.id, layout.SlotOf(q.name)))
	}
	return LeaderInfo{}, q.errorf(ErrNoLeader)
}

// leaderRead is a read of an election's leader: who leads (zero: nobody)
// and the revision read at; and whether the name's slot was settled on the
// session's cluster then (always on a cluster that is not sharded; on a
// sharded one, its stamp was active and no move of it was recorded).
type leaderRead struct {
	info    LeaderInfo
	rev     int64
	settled bool
}

// leader reads, over kv, the first candidate of q at rev (0: now,
// linearizable), and on a routed session's cluster the slot's stamp at the
// same revision.
func (q queue) leader(ctx context.Context, kv clientv3.KV, rev int64) (leaderRead, error) {
	var at []clientv3.OpOption
	if rev > 0 {
		at = append(at, clientv3.WithRev(rev))
	}
	first := clientv3.OpGet(q.dir, append(clientv3.WithFirstCreate(), at...)...)
	lr := leaderRead{settled: true}
	var kvs []*mvccpb.KeyValue
	if c := q.s.stamps; c != nil {
		slot := layout.SlotOf(q.name)
		resp, err := kv.Txn(ctx).Then(first, clientv3.OpGet(layout.StampKey(slot), at...)).Commit()
		if err != nil {
			return leaderRead{}, err
		}
		kvs, lr.rev = resp.Responses[0].GetResponseRange().Kvs, resp.Header.Revision
		lr.settled = c.settled(slot, layout.DecodeStamp(resp.Responses[1].GetResponseRange().Kvs))
	} else {
		resp, err := kv.Do(ctx, first)
		if err != nil {
			return leaderRead{}, err
		}
		kvs, lr.rev = resp.Get().Kvs, resp.Get().Header.Revision
	}
	if len(kvs) == 0 {
		return lr, nil
	}
	if tag := tagOf(q.dir, string(kvs[0].Key)); tag != q.tag {
		kind, _ := kindOfTag(tag)
		return leaderRead{}, fmt.Errorf("%w: name is used by a %s", ErrKindMismatch, kind)
	}
	lr.info = leaderInfo(kvs[0])
	return lr, nil
}

func leaderInfo(kv *mvccpb.KeyValue) LeaderInfo {
	v := decodeValue(kv.Value)
	return LeaderInfo{Value: v.Value, Token: tokenOf(v.Gen, kv.CreateRevision), Key: string(kv.Key),
		Identity: v.Identity, Lease: clientv3.LeaseID(kv.Lease)}
}

// Leadership is one term of leadership won by Campaign. Its methods are safe
// for concurrent use.
type Leadership struct {
	g Lock // the leader's key is a grant of the election's queue

	pmu sync.Mutex // serialises Proclaim
	// mod is the leader key's mod revision as this process last wrote it
	// (Campaign, Proclaim); 0 when unknown (after a write of unknown outcome).
	mod int64
}

// Token returns the leader key's create revision: a fencing token for what
// the leader writes, larger in every later term.
func (l *Leadership) Token() Token { return l.g.Token() }

// Key returns the leader's etcd key.
func (l *Leadership) Key() string { return l.g.Key() }

// Guard returns a comparison that holds inside an etcd Txn only while this
// term of leadership is current.
func (l *Leadership) Guard() clientv3.Cmp { return l.g.Guard() }

// Context returns a context canceled when leadership is lost or resigned;
// context.Cause tells why (ErrReleased after Resign, ErrSessionExpired,
// ErrSessionClosed, ErrLockLost), as for Lock.Context.
func (l *Leadership) Context() context.Context { return l.g.Context() }

// Proclaim changes the leader's value without a new election. It is guarded
// by the leader key's create revision, and its requests end when the term
// ends (Context): it returns an error wrapping ErrNotHeld and the loss cause,
// and changes nothing, when this candidacy no longer leads or stops leading
// before etcd answers (a write in flight then may still be applied, but only
// while the term is current); and ctx's error when ctx ends first.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	w := l.g.w
	l.pmu.Lock()
	defer l.pmu.Unlock()
	tctx, release := l.g.underGrant(ctx)
	defer release()
	fail := func(err error) error {
		if nh := l.g.notHeld(); nh != nil {
			return w.q.opError("proclaim", nh)
		}
		return w.q.opError("proclaim", ctxErr(ctx, err))
	}
	for {
		if nh := l.g.notHeld(); nh != nil {
			return w.q.opError("proclaim", nh)
		}
		if l.mod == 0 {
			// A Proclaim of unknown outcome may still be applied: learn
			// where the key is; the compare below then refuses that write.
			resp, err := w.q.s.cli.Get(tctx, w.key, clientv3.WithKeysOnly())
			if err != nil {
				return fail(err)
			}
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != w.rev {
				return w.q.opError("proclaim", fmt.Errorf("%w: %w", ErrNotHeld, w.lost()))
			}
			l.mod = resp.Kvs[0].ModRevision
		}
		// Guarded by the term (create revision) and by the last write of
		// this process (mod revision): a late copy of an earlier Proclaim
		// can never overwrite a later value.
		resp, err := w.q.s.cli.Txn(tctx).
			If(clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.rev),
				clientv3.Compare(clientv3.ModRevision(w.key), "=", l.mod)).
			Then(clientv3.OpPut(w.key, w.q.s.value(w.sk.with(value), w.grantedAt), clientv3.WithLease(w.q.s.lease))).
			Commit()
		switch wire.Classify(err) {
		case wire.Applied:
			if resp.Succeeded {
				l.mod = resp.Header.Revision
				return nil
			}
			l.mod = 0 // changed since (a late write of ours, a loss): look again
			continue
		case wire.LeaseGone:
			return w.q.opError("proclaim", fmt.Errorf("%w: %w", ErrNotHeld, w.q.s.leaseLost()))
		}
		l.mod = 0 // it may still be applied
		return fail(err)
	}
}

// Resign gives up leadership, exactly as Lock.Unlock releases a lock:
// Context is canceled with ErrReleased at once and the leader key is deleted
// (guarded by its create revision), so the next candidate leads at once. It
// returns nil if this candidacy led when Resign was first called, on every
// later call too; an error wrapping ErrNotHeld and the cause if leadership
// was lost before; ctx's error when ctx ends first (the session's reaper then
// finishes the delete); an error wrapping ErrNotHeld and ErrSessionExpired
// (or ErrSessionClosed) when the session ends or its client is closed before
// the delete is confirmed. It is safe to retry.
func (l *Leadership) Resign(ctx context.Context) error { return l.g.Unlock(ctx) }
