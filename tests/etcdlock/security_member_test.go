package etcdlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestSecuritySessionOnMember: on a cluster that holds
// etcdlock-shards/generation (a member of a sharded deployment), a plain
// session of a user who may read it (root) opens and has its acquisitions
// refused; a user whose role does not let her read etcdlock-shards/
// (alice) still opens a session and acquires her names: her session cannot
// tell, and is taken for one on a cluster that is not sharded.
func TestSecuritySessionOnMember(t *testing.T) {
	sc := startSecure(t)
	ctx := embedtest.Context(t, time.Minute)
	if _, err := sc.root.Put(ctx, "etcdlock-shards/generation", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.alice.Get(ctx, "etcdlock-shards/generation"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("alice's read of etcdlock-shards/generation: %v, want permission denied", err)
	}
	alice := locktest.OpenSession(t, sc.alice, etcdlock.WithIdentity("alice/member"))
	l := mustLock(t, etcdlock.NewMutex(alice, "team-a/member"))
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	root := locktest.OpenSession(t, sc.root, etcdlock.WithIdentity("root/member"))
	_, err := etcdlock.NewMutex(root, "team-a/member").Lock(ctx)
	if !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("root's Lock on a member cluster: %v, want ErrInvalidArgument", err)
	}
	t.Log(err)
}
