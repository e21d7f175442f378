package etcdlock

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RWMutex is a fair, distributed reader/writer lock: readers share it,
// writers hold it alone, and all are granted in the order they asked, so a
// waiting writer holds off later readers (no writer starvation). A reader
// watches only the nearest writer ahead of it, a writer only the nearest key
// ahead of it. An RWMutex is safe for concurrent use; every call is its own
// grant.
//
// Fencing: check a writer's Token with Fence.Admit and a reader's with
// Fence.AdmitShared, which admits readers that hold together without letting
// any of them in after a later writer.
type RWMutex struct {
	s    *Session
	name string
}

// NewRWMutex returns the read-write lock called name on session s. It does
// not talk to etcd; a bad name or a nil session is reported by its methods.
func NewRWMutex(s *Session, name string) *RWMutex { return &RWMutex{s: s, name: name} }

// Name returns the lock's name.
func (m *RWMutex) Name() string { return m.name }

// RLock waits, in FIFO order, until no writer holds or waits ahead of this
// call, and returns a shared grant. Errors are those of Mutex.Lock.
func (m *RWMutex) RLock(ctx context.Context) (*Lock, error) {
	return m.acquire(ctx, tagReader, readerPolicy{})
}

// Lock waits, in FIFO order, until nobody holds or waits ahead of this call,
// and returns an exclusive grant. Errors are those of Mutex.Lock.
func (m *RWMutex) Lock(ctx context.Context) (*Lock, error) {
	return m.acquire(ctx, tagWriter, exclusive{})
}

func (m *RWMutex) acquire(ctx context.Context, tag string, pol policy) (*Lock, error) {
	return asLock(acquisition(ctx, m.s, m.name, tag, "lock", false, func(q queue) (*waiter, error) {
		return q.acquire(ctx, "", pol)
	}))
}

// TryRLock takes a shared grant only if no writer holds or waits, in one
// round trip; otherwise it returns an error wrapping ErrLocked and writes
// nothing.
func (m *RWMutex) TryRLock(ctx context.Context) (*Lock, error) {
	return asLock(acquisition(ctx, m.s, m.name, tagReader, "lock", true, func(q queue) (*waiter, error) {
		// Only readers may be queued: nothing before "r/" and nothing after it.
		readers := q.dir + tagReader + "/"
		return q.tryEnqueueIf(ctx, "",
			clientv3.Compare(clientv3.CreateRevision(q.dir), "=", 0).WithRange(readers),
			clientv3.Compare(clientv3.CreateRevision(clientv3.GetPrefixRangeEnd(readers)), "=", 0).
				WithRange(clientv3.GetPrefixRangeEnd(q.dir)))
	}))
}

// TryLock takes an exclusive grant only if nobody holds or waits, in one
// round trip; otherwise it returns an error wrapping ErrLocked and writes
// nothing.
func (m *RWMutex) TryLock(ctx context.Context) (*Lock, error) {
	return asLock(acquisition(ctx, m.s, m.name, tagWriter, "lock", true, func(q queue) (*waiter, error) {
		return q.tryEnqueue(ctx, "")
	}))
}

// readerPolicy grants a reader when no writer is ahead of it, and watches the
// nearest writer ahead otherwise. It needs every key ahead (readers ahead do
// not matter, but a writer may be behind many of them).
type readerPolicy struct{}

func (readerPolicy) lookback() int64    { return 0 }
func (readerPolicy) touchOnGrant() bool { return false }
func (readerPolicy) decide(ahead []*mvccpb.KeyValue) (bool, watchPlan) {
	for _, kv := range ahead {
		if isWriterKey(string(kv.Key)) {
			return false, watchKey(string(kv.Key))
		}
	}
	return true, watchPlan{}
}

// isWriterKey reports whether key is an RWMutex writer's (a tag that is not
// a reader's counts as a writer: it excludes readers).
func isWriterKey(key string) bool {
	tag := tagOf(namePrefixOfKey(key), key)
	return tag != tagReader
}
