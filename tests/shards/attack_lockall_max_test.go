package shards_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	"github.com/etcdlock/etcdlock/shard"
)

// TestAttackTryLockAllMaxNames: a sharded TryLockAll (and LockAll) of
// shard.MaxLockAllNames names of one slot, all free, holds them all, as
// the limit's doc promises: the Txn must stay within the server's default
// --max-txn-ops (128) in its compares too, not only in its branches.
// Before, a TryLockAll compared per name its key's absence, the barrier,
// the stamp (two) and the name's emptiness: 160 compares, and etcd
// refused it (ErrInvalidArgument, "too many operations in txn request").
func TestAttackTryLockAllMaxNames(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1)
	ctx := embedtest.Context(t, time.Minute)
	s := session(t, d.newShards(t))
	a := d.nameOn(t, "c0")
	for _, tc := range []struct{ try, lose bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		try := tc.try
		var names []string
		for i := range shard.MaxLockAllNames {
			names = append(names, fmt.Sprintf("{%s}/%v-%v-%d", shard.KeyOf(a), try, tc.lose, i))
		}
		// lose: the first answer is lost, the retry (with its Else reads)
		// adopts the applied Txn.
		var once sync.Once
		lost := false
		testhook.SetHook(s, func(p testhook.Point, err error) error {
			if tc.lose && p == testhook.Enqueued && err == nil {
				once.Do(func() { lost, err = true, context.DeadlineExceeded })
			}
			return err
		})
		lockAll := s.LockAll
		if try {
			lockAll = s.TryLockAll
		}
		ls, err := lockAll(ctx, names...)
		testhook.SetHook(s, nil)
		if lost != tc.lose {
			t.Errorf("%+v: an answer lost: %v", tc, lost)
		}
		if err != nil {
			t.Errorf("%+v: %d names: %v", tc, len(names), err)
			continue
		}
		if n := len(ls.All()); n != len(names) {
			t.Errorf("%+v: %d held, want %d", tc, n, len(names))
		}
		if err := ls.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
