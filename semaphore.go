package etcdlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Semaphore is a fair, distributed counting semaphore: at most n holders of
// a name at once, waiters granted in the order they called Acquire. A
// release wakes only the waiter it admits (plus, when that waiter had been
// waiting, the one behind it, which then watches the holders). A Semaphore is
// safe for concurrent use; every Acquire call is its own grant.
//
// Every user of a name must agree on n: acquiring a name held or waited on
// with another size fails with ErrKindMismatch, never over-admits.
//
// A semaphore grant's Token orders grants (it is the key's create revision)
// but cannot fence the n holders against each other: they hold at once by
// design. Use it to bound concurrency; protect data with a Mutex or RWMutex.
type Semaphore struct {
	s    *Session
	name string
	n    int
}

// NewSemaphore returns the semaphore of n on name on session s. It does not
// talk to etcd; a bad name, a nil session or n < 1 are reported by Acquire
// and TryAcquire (ErrInvalidName, ErrInvalidArgument).
func NewSemaphore(s *Session, name string, n int) *Semaphore {
	return &Semaphore{s: s, name: name, n: n}
}

// Name returns the semaphore's name.
func (m *Semaphore) Name() string { return m.name }

// Size returns n, the most holders at once.
func (m *Semaphore) Size() int { return m.n }

func (m *Semaphore) queue() (queue, error) {
	q, err := newQueue(m.s, m.name, "s"+strconv.Itoa(m.n), "acquire")
	if err != nil {
		return q, err
	}
	if m.n < 1 {
		return q, q.errorf(fmt.Errorf("%w: semaphore size %d < 1", ErrInvalidArgument, m.n))
	}
	return q, nil
}

// Acquire waits, in FIFO order, until fewer than n grants are held ahead of
// this call, and returns the grant. Errors are those of Mutex.Lock, and
// ErrKindMismatch when the name is used with another size or another kind of
// recipe. A failed Acquire leaves no key behind.
func (m *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	q, err := m.queue()
	if err != nil {
		return nil, err
	}
	return asLock(q.acquire(ctx, "", counting{n: int64(m.n)}))
}

// TryAcquire takes a grant only if fewer than n keys (holders or waiters)
// are queued, and returns an error wrapping ErrLocked otherwise, writing
// nothing then. It costs two round trips: a read, then a write guarded by
// "nothing joined since".
func (m *Semaphore) TryAcquire(ctx context.Context) (*Lock, error) {
	q, err := m.queue()
	if err != nil {
		return nil, err
	}
	return q.tryEnqueueCounting(ctx, int64(m.n))
}

// counting is the Semaphore policy: granted with fewer than n keys ahead;
// the front waiter (exactly n ahead) watches those n; the others watch their
// predecessor, including its grant (see touchOnGrant), for that is when they
// become the front.
type counting struct{ n int64 }

func (c counting) lookback() int64    { return c.n + 1 }
func (c counting) touchOnGrant() bool { return true }
func (c counting) decide(ahead []*mvccpb.KeyValue) (bool, watchPlan) {
	switch k := int64(len(ahead)); {
	case k < c.n:
		return true, watchPlan{}
	case k == c.n:
		set := make(map[string]bool, k)
		for _, kv := range ahead {
			set[string(kv.Key)] = true
		}
		return false, watchPlan{set: set}
	default:
		return false, watchPlan{key: string(ahead[0].Key), puts: true}
	}
}

// tryEnqueueCounting joins the queue only if fewer than n keys are in it,
// all of its kind and size: it reads the queue, then puts its key guarded by
// "no key created since that read" (a waiter's touch or a release does not
// count: neither adds a key). A concurrent join makes it retry a few times.
func (q queue) tryEnqueueCounting(ctx context.Context, n int64) (l *Lock, err error) {
	start := time.Now()
	defer func() {
		var w *waiter
		if l != nil {
			w = l.w
		}
		q.finishAcquire(start, w, err)
	}()
	if err := ctx.Err(); err != nil {
		return nil, q.errorf(ctxErr(ctx, err))
	}
	if err := q.s.live(); err != nil {
		return nil, q.errorf(err)
	}
	opCtx, done := q.s.bound(ctx)
	defer done()
	for range 5 {
		actx, kv, attemptDone := q.s.attempt(opCtx, true)
		resp, err := kv.Get(actx, q.dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(n))
		attemptDone()
		if err != nil {
			return nil, q.errorf(q.s.cause(ctx, ctxErr(opCtx, err)))
		}
		if err := q.checkKind(resp.Kvs); err != nil {
			return nil, q.errorf(err)
		}
		if resp.Count >= n {
			return nil, q.errorf(fmt.Errorf("%w: %d of %d held or waited on", ErrLocked, resp.Count, n))
		}
		w, _, err := q.tryPut(opCtx, "", []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(q.dir), "<", resp.Header.Revision+1).WithPrefix()})
		if err != nil {
			return nil, q.errorf(q.s.cause(ctx, err))
		}
		if w == nil {
			continue // someone joined since the read
		}
		w, err = q.grant(ctx, w)
		return asLock(w, err)
	}
	return nil, q.errorf(fmt.Errorf("%w: the queue kept changing", ErrLocked))
}
