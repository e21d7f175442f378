package shards_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// recipes is what acquisitions uses of a session: a *shard.Session, or a
// plain one (plainRecipes).
type recipes interface {
	NewMutex(name string) *etcdlock.Mutex
	NewRWMutex(name string) *etcdlock.RWMutex
	NewSemaphore(name string, n int) *etcdlock.Semaphore
	NewElection(name string) *etcdlock.Election
	LockAll(ctx context.Context, names ...string) (*etcdlock.Locks, error)
	TryLockAll(ctx context.Context, names ...string) (*etcdlock.Locks, error)
}

type plainRecipes struct{ s *etcdlock.Session }

func (p plainRecipes) NewMutex(n string) *etcdlock.Mutex     { return etcdlock.NewMutex(p.s, n) }
func (p plainRecipes) NewRWMutex(n string) *etcdlock.RWMutex { return etcdlock.NewRWMutex(p.s, n) }
func (p plainRecipes) NewSemaphore(n string, k int) *etcdlock.Semaphore {
	return etcdlock.NewSemaphore(p.s, n, k)
}
func (p plainRecipes) NewElection(n string) *etcdlock.Election { return etcdlock.NewElection(p.s, n) }
func (p plainRecipes) LockAll(ctx context.Context, names ...string) (*etcdlock.Locks, error) {
	return etcdlock.LockAll(ctx, p.s, names...)
}
func (p plainRecipes) TryLockAll(ctx context.Context, names ...string) (*etcdlock.Locks, error) {
	return etcdlock.TryLockAll(ctx, p.s, names...)
}

// acquisitions returns every way to acquire name on s, by name; each
// releases what it got.
func acquisitions(ctx context.Context, s recipes, name string) map[string]func() error {
	lock := func(l *etcdlock.Lock, err error) error {
		if err == nil {
			err = l.Unlock(ctx)
		}
		return err
	}
	m, rw, sem, e := s.NewMutex(name), s.NewRWMutex(name), s.NewSemaphore(name, 2), s.NewElection(name)
	run := func(context.Context, *etcdlock.Lock) error { return nil }
	return map[string]func() error{
		"Mutex.Lock":           func() error { return lock(m.Lock(ctx)) },
		"Mutex.TryLock":        func() error { return lock(m.TryLock(ctx)) },
		"RWMutex.RLock":        func() error { return lock(rw.RLock(ctx)) },
		"RWMutex.Lock":         func() error { return lock(rw.Lock(ctx)) },
		"RWMutex.TryRLock":     func() error { return lock(rw.TryRLock(ctx)) },
		"RWMutex.TryLock":      func() error { return lock(rw.TryLock(ctx)) },
		"Semaphore.Acquire":    func() error { return lock(sem.Acquire(ctx)) },
		"Semaphore.TryAcquire": func() error { return lock(sem.TryAcquire(ctx)) },
		"Election.Campaign": func() error {
			l, err := e.Campaign(ctx, "v")
			if err == nil {
				err = l.Resign(ctx)
			}
			return err
		},
		"LockAll": func() error {
			ls, err := s.LockAll(ctx, name, name+"/b")
			if err == nil {
				err = ls.Unlock(ctx)
			}
			return err
		},
		"TryLockAll": func() error {
			ls, err := s.TryLockAll(ctx, name, name+"/b")
			if err == nil {
				err = ls.Unlock(ctx)
			}
			return err
		},
		"Mutex.RunOnce":    func() error { return m.RunOnce(ctx, "1", run) },
		"Mutex.TryRunOnce": func() error { return s.NewMutex(name+"/try").TryRunOnce(ctx, "1", run) },
		"Mutex.Run":        func() error { return m.Run(ctx, run) },
		"Election.Run":     func() error { return e.Run(ctx, "v", func(context.Context) error { return nil }) },
	}
}

// TestPlainSessionOnMember: a plain session on a member cluster of a
// sharded deployment (the root, and a member only) opens, but every
// acquisition on it is refused with ErrInvalidArgument, saying to use
// shard.NewSession, and writes nothing, also on the session Run opens
// when it is lost; its reads work. The sharded
// session's own sessions on those clusters acquire as before.
func TestPlainSessionOnMember(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	sharded := session(t, d.newShards(t))
	for _, id := range d.ids {
		t.Run(id, func(t *testing.T) {
			plain, err := etcdlock.NewSession(ctx, d.clients[id])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = plain.Close() })
			name := d.nameOn(t, id)
			for what, acquire := range acquisitions(ctx, plainRecipes{plain}, name) {
				err := acquire()
				if !errors.Is(err, etcdlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "shard.NewSession") {
					t.Fatalf("%s on a plain session of %s: %v; want ErrInvalidArgument naming shard.NewSession", what, id, err)
				}
				if what == "Mutex.Lock" {
					t.Log(err)
				}
			}
			resp, err := d.clients[id].Get(ctx, "etcdlock/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil || resp.Count != 0 {
				t.Fatalf("keys under etcdlock/ on %s after the refusals: %v, %v", id, resp, err)
			}
			if _, err := etcdlock.NewElection(plain, name).Leader(ctx); !errors.Is(err, etcdlock.ErrNoLeader) {
				t.Fatalf("Leader on a plain session: %v, want ErrNoLeader", err)
			}
			// Run replaces a lost session with one of its own: refused too.
			testhook.Expire(plain, etcdlock.ErrSessionExpired, etcdlock.ReasonValidityClock)
			err = etcdlock.NewMutex(plain, name).Run(ctx, func(context.Context, *etcdlock.Lock) error { return nil })
			if !errors.Is(err, etcdlock.ErrInvalidArgument) {
				t.Fatalf("Mutex.Run after the plain session was lost: %v, want ErrInvalidArgument", err)
			}
			for what, acquire := range acquisitions(ctx, sharded, name) {
				if err := acquire(); err != nil {
					t.Fatalf("%s on the sharded session: %v", what, err)
				}
			}
		})
	}
}
