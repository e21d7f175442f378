package etcdlock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestBarrierRefusesLateCreate: an acquisition gives up a key whose write had
// an unknown outcome (applied, its answer lost). The reaper raises the
// session's barrier, then deletes what exists. A copy of the lost write that
// reaches etcd only after that, however late, is refused: it cannot create a
// key nobody holds (a phantom holder for the rest of the session).
func TestBarrierRefusesLateCreate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		acquire func(ctx context.Context, m *etcdlock.Mutex) error
	}{
		{"Lock", func(ctx context.Context, m *etcdlock.Mutex) error { _, err := m.Lock(ctx); return err }},
		{"TryLock", func(ctx context.Context, m *etcdlock.Mutex) error { _, err := m.TryLock(ctx); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := shared.TestClient(t)
			s := locktest.OpenSession(t, cli)
			name := embedtest.UniqueName(t, "test")
			dir := layout.NamePrefix(name)
			key := testhook.WaiterKey(dir, testhook.TagMutex, s.Lease(), 0)
			lateCopy := testhook.BarrierGuard(s, dir) // what every write of this call compares
			ctx := embedtest.Context(t, 30*time.Second)
			var losing atomic.Bool
			losing.Store(true)
			reaped := make(chan struct{})
			setHook(t, loseAnswersHook(&losing, reaped), s)
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			err := tc.acquire(short, etcdlock.NewMutex(s, name))
			cancel()
			losing.Store(false)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s with lost answers: %v", tc.name, err)
			}
			select {
			case <-reaped:
			case <-ctx.Done():
				t.Fatal("the reaper never deleted the key")
			}
			if keys := keysUnder(t, cli, name); len(keys) != 0 {
				t.Fatalf("keys left after the reaper: %v", keys)
			}
			// The lost write, delivered now.
			deliverLateCreate(t, ctx, cli, s, key, lateCopy)
			// The session goes on: its next Lock is granted.
			l := mustLock(t, etcdlock.NewMutex(s, name))
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// loseAnswersHook returns a test hook that loses the answer of every
// enqueue (applied) while losing is set, and closes reaped once the reaper
// has deleted what exists.
func loseAnswersHook(losing *atomic.Bool, reaped chan struct{}) func(testhook.Point, error) error {
	var once sync.Once
	return func(p testhook.Point, err error) error {
		switch {
		case p == testhook.Enqueued && losing.Load():
			return context.DeadlineExceeded // applied, its answer lost
		case p == testhook.Reaped && err == nil:
			once.Do(func() { close(reaped) })
		}
		return err
	}
}

// deliverLateCreate sends a copy of s's given-up write of key (guarded by
// lateCopy, the barrier compare of its time) and checks it is refused.
func deliverLateCreate(t *testing.T, ctx context.Context, cli *clientv3.Client, s *etcdlock.Session, key string, lateCopy clientv3.Cmp) {
	t.Helper()
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0), lateCopy).
		Then(clientv3.OpPut(key, testhook.EncodeValue(s.Identity(), "", time.Now(), time.Time{}), clientv3.WithLease(s.Lease()))).
		Commit()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Fatalf("a late copy of the given-up write created %s", key)
	}
}

// TestBarrierRecreated: a barrier deleted by someone else is re-created by the
// next write that finds it gone, and locks go on working.
func TestBarrierRecreated(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	dir := layout.NamePrefix(name)
	ctx := embedtest.Context(t, 30*time.Second)
	if err := testhook.RaiseBarrier(ctx, s, dir); err != nil {
		t.Fatal(err)
	}
	raised := testhook.BarrierRev(s, dir)
	if _, err := cli.Delete(ctx, testhook.BarrierKey(dir, s.Lease())); err != nil {
		t.Fatal(err)
	}
	l := mustLock(t, etcdlock.NewMutex(s, name))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, testhook.BarrierKey(dir, s.Lease()))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision <= raised || resp.Kvs[0].Lease != int64(s.Lease()) {
		t.Fatalf("barrier after its deletion and a Lock: %v (raised at %d)", resp.Kvs, raised)
	}
}

// TestFailedAcquireLeavesNoKey: a Lock whose ctx ran out while it waited, and
// one refused for another kind, remove their keys before they return.
func TestFailedAcquireLeavesNoKey(t *testing.T) {
	cli := shared.TestClient(t)
	holder := locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	l := mustLock(t, etcdlock.NewMutex(holder, name))
	want := []string{l.Key()}
	for _, tc := range []struct {
		name    string
		acquire func(s *etcdlock.Session) error
		wantErr error
	}{
		{"ctx ran out while waiting", func(s *etcdlock.Session) error {
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := etcdlock.NewMutex(s, name).Lock(short)
			return err
		}, context.DeadlineExceeded},
		{"kind mismatch", func(s *etcdlock.Session) error {
			_, err := etcdlock.NewSemaphore(s, name, 3).Acquire(ctx)
			return err
		}, etcdlock.ErrKindMismatch},
		{"election behind a mutex", func(s *etcdlock.Session) error {
			_, err := etcdlock.NewElection(s, name).Campaign(ctx, "v")
			return err
		}, etcdlock.ErrKindMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := locktest.OpenSession(t, cli)
			if err := tc.acquire(s); !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			if got := keysUnder(t, cli, name); !slices.Equal(got, want) {
				t.Fatalf("keys right after the failed call: %v, want %v", got, want)
			}
		})
	}
}

// TestProclaimRefusesLateCopy: Proclaim is guarded by the leader key's last
// write of this process, so a late copy of an earlier Proclaim (of unknown
// outcome) can never overwrite a later value; after such an outcome the next
// Proclaim still succeeds.
func TestProclaimRefusesLateCopy(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	e := etcdlock.NewElection(s, name)
	l, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Proclaim(canceled, "lost"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Proclaim on a canceled ctx: %v", err)
	}
	if err := l.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	// A copy of the first Proclaim (sent when the key was as Campaign left
	// it), delivered now.
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.Key()), "=", int64(l.Token())),
			clientv3.Compare(clientv3.ModRevision(l.Key()), "=", int64(l.Token()))).
		Then(clientv3.OpPut(l.Key(), testhook.EncodeValue(s.Identity(), "stale", time.Now(), time.Time{}), clientv3.WithLease(s.Lease()))).
		Commit()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Fatal("a late copy of an earlier Proclaim overwrote the leader's value")
	}
	info, err := e.Leader(ctx)
	if err != nil || info.Value != "v2" {
		t.Fatalf("Leader = %+v, %v; want v2", info, err)
	}
	if err := l.Proclaim(ctx, "v3"); err != nil {
		t.Fatal(err)
	}
}
