package shard

// This file holds the sharded session, and the router it gives the core
// (seam.Router, the one seam between package etcdlock and this one).

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/internal/seam"
	"github.com/etcdlock/etcdlock/internal/testhook"
)

// MaxLockAllNames is the most names one LockAll or TryLockAll of a Session
// takes: fewer than etcdlock.MaxLockAllNames, since its Txn also compares
// and reads each name's slot stamp (four operations per name in a branch).
const MaxLockAllNames = 32

// Session is a session whose names live on the clusters of a sharded
// deployment: each acquisition goes to the cluster that owns the name's
// slot, on a session (one lease) of that cluster opened on first use. Make
// its recipes with its methods (NewMutex, NewRWMutex, NewSemaphore,
// NewElection, LockAll, TryLockAll): they are the library's own, and work
// as on an etcdlock.Session, with these differences:
//
//   - Tokens carry the cluster's generation (etcdlock.Token.Generation), so
//     a name's tokens keep growing when its slot moves to another cluster.
//   - A loss is per cluster: when one cluster's session is lost, only its
//     grants are (each grant's Context says so), and the next acquisition
//     there opens a new one (again, until its ctx ends, when an opening
//     is born expired: a lease grant slower than the TTL, as while a member
//     restarts). So a Session itself is never lost: Done and Err report
//     Close only.
//   - A Session has no lease of its own (a grant's lease is in its
//     Lock.Key and in Describe); ValidUntil is the earliest of its live
//     cluster sessions'.
//   - While a name's slot moves, its acquisitions wait for the move (the
//     Try forms return etcdlock.ErrLocked); LockAll takes only names of one
//     cluster (give them one shard key, see KeyOf), at most
//     MaxLockAllNames.
//   - Close of the Shards it routes through closes it first (its grants
//     are released, its waits end, while the member clients still work):
//     its acquisitions then fail with an error wrapping
//     etcdlock.ErrSessionClosed (Mutex.Run and Election.Run return it),
//     as after its own Close.
//
// A Session is safe for concurrent use.
type Session struct {
	s          *etcdlock.Session // the core's routed session (seam.NewRoutedSession)
	r          *Shards           // the Shards it routes through; its Close closes s
	testHandle                   // the tests' way to s's knobs (testhooks.go)
}

// NewSession returns a session whose names live on the clusters of r, each
// cluster's session opened on first use with opts. ctx bounds nothing past
// this call (cluster sessions are opened later, under the acquisition's
// ctx). It returns an error wrapping etcdlock.ErrInvalidArgument for a nil
// r or an invalid option, and etcdlock.ErrSessionClosed once r is closed.
func NewSession(ctx context.Context, r *Shards, opts ...etcdlock.SessionOption) (*Session, error) {
	if r == nil {
		return nil, newError("new session", "", fmt.Errorf("%w: nil shards", etcdlock.ErrInvalidArgument))
	}
	anyOpts := make([]any, len(opts))
	for i, o := range opts {
		anyOpts[i] = o
	}
	s, err := seam.NewRoutedSession(ctx, r.root, router{r}, anyOpts...)
	if err != nil {
		return nil, err
	}
	rs := s.(*etcdlock.Session)
	ss := &Session{s: rs, r: r, testHandle: testhook.HandleOf(rs)}
	r.mu.Lock()
	closed := r.closed
	if !closed {
		if r.sessions == nil {
			r.sessions = map[*Session]struct{}{}
		}
		r.sessions[ss] = struct{}{}
	}
	r.mu.Unlock()
	if closed {
		// It has opened nothing yet: its Close only ends it.
		return nil, errors.Join(newError("new session", "", fmt.Errorf("%w: its Shards is closed", etcdlock.ErrSessionClosed)), rs.Close())
	}
	return ss, nil
}

// NewMutex returns the mutex called name on s (see etcdlock.NewMutex).
func (s *Session) NewMutex(name string) *etcdlock.Mutex { return etcdlock.NewMutex(s.s, name) }

// NewRWMutex returns the read-write lock called name on s (see
// etcdlock.NewRWMutex).
func (s *Session) NewRWMutex(name string) *etcdlock.RWMutex { return etcdlock.NewRWMutex(s.s, name) }

// NewSemaphore returns the semaphore of n called name on s (see
// etcdlock.NewSemaphore).
func (s *Session) NewSemaphore(name string, n int) *etcdlock.Semaphore {
	return etcdlock.NewSemaphore(s.s, name, n)
}

// NewElection returns the election called name on s (see
// etcdlock.NewElection). Its Leader reads the cluster the map gives the
// name's slot, and returns etcdlock.ErrSlotMoving when nobody leads there
// while the slot is moving.
func (s *Session) NewElection(name string) *etcdlock.Election { return etcdlock.NewElection(s.s, name) }

// LockAll is etcdlock.LockAll on s: names must live on one cluster, and be
// at most MaxLockAllNames.
func (s *Session) LockAll(ctx context.Context, names ...string) (*etcdlock.Locks, error) {
	if err := checkAll(names); err != nil {
		return nil, err
	}
	return etcdlock.LockAll(ctx, s.s, names...)
}

// TryLockAll is etcdlock.TryLockAll on s, with LockAll's limits.
func (s *Session) TryLockAll(ctx context.Context, names ...string) (*etcdlock.Locks, error) {
	if err := checkAll(names); err != nil {
		return nil, err
	}
	return etcdlock.TryLockAll(ctx, s.s, names...)
}

func checkAll(names []string) error {
	if len(names) > MaxLockAllNames {
		return newError("lock all", "", fmt.Errorf("%w: %d names, more than %d on a sharded session (shard.MaxLockAllNames)",
			etcdlock.ErrInvalidArgument, len(names), MaxLockAllNames))
	}
	return nil
}

// Identity returns the identity stored with the session's keys.
func (s *Session) Identity() string { return s.s.Identity() }

// TTL returns the TTL the session asks of each cluster.
func (s *Session) TTL() time.Duration { return s.s.TTL() }

// ValidUntil returns the earliest ValidUntil of its live cluster sessions
// (far ahead while it has none).
func (s *Session) ValidUntil() time.Time { return s.s.ValidUntil() }

// Done returns a channel that is closed once Close (its own or its
// Shards') is called.
func (s *Session) Done() <-chan struct{} { return s.s.Done() }

// Err returns nil until Close (its own or its Shards'), then
// etcdlock.ErrSessionClosed.
func (s *Session) Err() error { return s.s.Err() }

// Close closes every cluster session, in parallel (see
// etcdlock.Session.Close), and returns their errors joined. Later calls
// return the first call's result.
func (s *Session) Close() error {
	s.r.mu.Lock()
	delete(s.r.sessions, s)
	s.r.mu.Unlock()
	return s.s.Close()
}

// router is the seam.Router of a Session: the map of r.
type router struct{ r *Shards }

func (rt router) Owner(slot int) (string, <-chan struct{}, error) {
	m, changed := rt.r.snapshot()
	id := m.Owner[slot]
	if id == "" {
		return "", nil, fmt.Errorf("%w: slot %d of the name has no cluster in the slot map", etcdlock.ErrInvalidArgument, slot)
	}
	return id, changed, nil
}

func (rt router) Client(ctx context.Context, id string) (*clientv3.Client, error) {
	return rt.r.Client(ctx, id)
}

func (rt router) Moving(slot int) bool {
	_, moving := rt.r.Moving(slot)
	return moving
}
