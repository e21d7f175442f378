package acquire

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/shard"
)

// Session is what the commands and serve acquire on: a session of one
// cluster (Plain) or a sharded one (*shard.Session, which has these
// methods). The recipes it makes are the library's own.
type Session interface {
	NewMutex(name string) *etcdlock.Mutex
	NewRWMutex(name string) *etcdlock.RWMutex
	NewSemaphore(name string, n int) *etcdlock.Semaphore
	NewElection(name string) *etcdlock.Election
	LockAll(ctx context.Context, names ...string) (*etcdlock.Locks, error)
	TryLockAll(ctx context.Context, names ...string) (*etcdlock.Locks, error)
	Identity() string
	TTL() time.Duration
	ValidUntil() time.Time
	Done() <-chan struct{}
	Err() error
	Close() error
}

var _ Session = (*shard.Session)(nil)

// Plain returns s, a session of one cluster, as a Session.
func Plain(s *etcdlock.Session) Session { return plain{s} }

type plain struct{ *etcdlock.Session }

func (p plain) NewMutex(name string) *etcdlock.Mutex { return etcdlock.NewMutex(p.Session, name) }
func (p plain) NewRWMutex(name string) *etcdlock.RWMutex {
	return etcdlock.NewRWMutex(p.Session, name)
}
func (p plain) NewSemaphore(name string, n int) *etcdlock.Semaphore {
	return etcdlock.NewSemaphore(p.Session, name, n)
}
func (p plain) NewElection(name string) *etcdlock.Election {
	return etcdlock.NewElection(p.Session, name)
}
func (p plain) LockAll(ctx context.Context, names ...string) (*etcdlock.Locks, error) {
	return etcdlock.LockAll(ctx, p.Session, names...)
}
func (p plain) TryLockAll(ctx context.Context, names ...string) (*etcdlock.Locks, error) {
	return etcdlock.TryLockAll(ctx, p.Session, names...)
}

// Unwrap returns the session of one cluster s wraps; ok is false for a
// sharded s (which has one lease per cluster, none of its own).
func Unwrap(s Session) (ps *etcdlock.Session, ok bool) {
	p, ok := s.(plain)
	return p.Session, ok
}

// Lease returns the lease of s, or 0 for a sharded s.
func Lease(s Session) clientv3.LeaseID {
	if ps, ok := Unwrap(s); ok {
		return ps.Lease()
	}
	return 0
}
