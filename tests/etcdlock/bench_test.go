package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Per-operation costs against the package's shared 3-member cluster (fsync
// off). Run: go test -run '^$' -bench . -benchmem
// -benchmem counts every allocation of the process, so for the operations
// that talk to etcd the figures include the three embedded servers' work.

func BenchmarkMutexLockUnlock(b *testing.B) {
	s := locktest.OpenSession(b, shared.TestClient(b))
	m := etcdlock.NewMutex(s, embedtest.UniqueName(b, "test"))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEtcdMutexLockUnlock is the same loop with etcd's own
// concurrency.Mutex, for comparison in the same run.
func BenchmarkEtcdMutexLockUnlock(b *testing.B) {
	cli := shared.TestClient(b)
	s, err := concurrency.NewSession(cli)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	m := concurrency.NewMutex(s, "/bench-etcd/"+embedtest.UniqueName(b, "test"))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTryLockHeld(b *testing.B) {
	name := embedtest.UniqueName(b, "test")
	holder := mustLock(b, etcdlock.NewMutex(locktest.OpenSession(b, shared.TestClient(b)), name))
	defer holder.Unlock(context.Background())
	m := etcdlock.NewMutex(locktest.OpenSession(b, shared.TestClient(b)), name)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.TryLock(ctx); !errors.Is(err, etcdlock.ErrLocked) {
			b.Fatal(err)
		}
	}
}

func BenchmarkDescribe(b *testing.B) {
	cli := shared.TestClient(b)
	name := embedtest.UniqueName(b, "test")
	l := mustLock(b, etcdlock.NewMutex(locktest.OpenSession(b, cli), name))
	defer l.Unlock(context.Background())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := etcdlock.Describe(ctx, cli, name); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSessionOpenClose(b *testing.B) {
	cli := shared.TestClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := etcdlock.NewSession(ctx, cli, etcdlock.WithTTL(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
