package etcdlock_test

import (
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestGrantStamp: a key granted as it entered the queue is held since its
// enqueue; one granted after a wait records when (a grant stamp, written in
// the background), and so does a semaphore's grant (with its touch) and an
// election's, whose later Proclaim keeps the stamp.
func TestGrantStamp(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, time.Minute)
	for _, tc := range []struct {
		kind string
		take func(s *etcdlock.Session, name string) (release func() error)
	}{
		{"mutex", func(s *etcdlock.Session, name string) func() error {
			l := mustLock(t, etcdlock.NewMutex(s, name))
			return func() error { return l.Unlock(ctx) }
		}},
		{"semaphore of 1", func(s *etcdlock.Session, name string) func() error {
			l, err := etcdlock.NewSemaphore(s, name, 1).Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return func() error { return l.Unlock(ctx) }
		}},
		{"election", func(s *etcdlock.Session, name string) func() error {
			l, err := etcdlock.NewElection(s, name).Campaign(ctx, "v1")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Proclaim(ctx, "v2"); err != nil {
				t.Fatal(err)
			}
			return func() error { return l.Resign(ctx) }
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			name := embedtest.UniqueName(t, "test")
			releaseFirst := tc.take(locktest.OpenSession(t, cli), name)
			st := locktest.WaitState(t, cli, name, "the first holder", func(st *etcdlock.LockState) bool { return st.Holder != nil })
			if h := st.Holder; h.Stamped || !h.Granted.Equal(h.Enqueued) {
				t.Fatalf("a grant at enqueue: %+v; want Granted = Enqueued, no stamp", h)
			}
			next := make(chan func() error, 1)
			go func() { next <- tc.take(locktest.OpenSession(t, cli), name) }()
			locktest.WaitState(t, cli, name, "a waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
			released := time.Now()
			if err := releaseFirst(); err != nil {
				t.Fatal(err)
			}
			releaseSecond := <-next
			st = locktest.WaitState(t, cli, name, "the grant stamp", func(st *etcdlock.LockState) bool { return st.Holder != nil && st.Holder.Stamped })
			h := st.Holder
			if !h.Granted.After(h.Enqueued) || h.Granted.Before(released.Truncate(time.Millisecond)) {
				t.Fatalf("the stamp %v; want after the enqueue %v and the release %v", h.Granted, h.Enqueued, released)
			}
			if tc.kind == "election" && h.Value != "v2" {
				t.Fatalf("value %q after Proclaim; want v2 (the stamp never overwrites a later value)", h.Value)
			}
			if err := releaseSecond(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
