package etcdlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestKindCheckSeesWholeQueue: a refused joiner's key that is still in the
// queue (its removal failed) sits between a holder and the next joiner; the
// next joiner must see the holder's kind behind it, not only its neighbour.
func TestKindCheckSeesWholeQueue(t *testing.T) {
	for _, tc := range []struct {
		name       string
		holder     func(s *etcdlock.Session, name string) (*etcdlock.Lock, error)
		strayTag   string
		joinerSize int
	}{
		{"mutex holds, semaphore joins", func(s *etcdlock.Session, name string) (*etcdlock.Lock, error) {
			return etcdlock.NewMutex(s, name).Lock(embedtest.Context(t, 10*time.Second))
		}, "s5", 5},
		{"semaphore of 1 holds, semaphore of 5 joins", func(s *etcdlock.Session, name string) (*etcdlock.Lock, error) {
			return etcdlock.NewSemaphore(s, name, 1).Acquire(embedtest.Context(t, 10*time.Second))
		}, "s5", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := shared.TestClient(t)
			holderS, strayS, joinerS := locktest.OpenSession(t, cli), locktest.OpenSession(t, cli), locktest.OpenSession(t, cli)
			name := embedtest.UniqueName(t, "test")
			ctx := embedtest.Context(t, 30*time.Second)
			if _, err := tc.holder(holderS, name); err != nil {
				t.Fatal(err)
			}
			stray := testhook.WaiterKey(layout.NamePrefix(name), tc.strayTag, strayS.Lease(), 7)
			if _, err := cli.Put(ctx, stray, testhook.EncodeValue(strayS.Identity(), "", time.Now(), time.Time{}), clientv3.WithLease(strayS.Lease())); err != nil {
				t.Fatal(err)
			}
			sem := etcdlock.NewSemaphore(joinerS, name, tc.joinerSize)
			if l, err := sem.Acquire(ctx); !errors.Is(err, etcdlock.ErrKindMismatch) {
				t.Fatalf("Acquire behind a stray key: %v, %v; want ErrKindMismatch", l, err)
			}
			if l, err := sem.TryAcquire(ctx); !errors.Is(err, etcdlock.ErrKindMismatch) {
				t.Fatalf("TryAcquire behind a stray key: %v, %v; want ErrKindMismatch", l, err)
			}
		})
	}
}
