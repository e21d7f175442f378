package etcdlock

import (
	"context"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
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

// acquire runs op on the semaphore's queue (see acquisition), after checking n.
func (m *Semaphore) acquire(ctx context.Context, try bool, op func(queue) (*waiter, error)) (*Lock, error) {
	tag := "s" + strconv.Itoa(m.n)
	if m.n < 1 {
		return nil, newError("acquire", m.name, fmt.Errorf("%w: semaphore size %d < 1", ErrInvalidArgument, m.n))
	}
	return asLock(acquisition(ctx, m.s, m.name, tag, "acquire", try, op))
}

// Acquire waits, in FIFO order, until fewer than n grants are held ahead of
// this call, and returns the grant. Errors are those of Mutex.Lock, and
// ErrKindMismatch when the name is used with another size or another kind of
// recipe. A failed Acquire leaves no key behind.
func (m *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	return m.acquire(ctx, false, func(q queue) (*waiter, error) {
		return q.acquire(ctx, "", counting{n: int64(m.n)})
	})
}

// TryAcquire takes a grant only if fewer than n keys (holders or waiters)
// are queued, and returns an error wrapping ErrLocked otherwise, writing
// nothing then. It costs two round trips: a read, then a write guarded by
// "nothing joined since".
func (m *Semaphore) TryAcquire(ctx context.Context) (*Lock, error) {
	return m.acquire(ctx, true, func(q queue) (*waiter, error) {
		return q.tryEnqueueCounting(ctx, int64(m.n))
	})
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
