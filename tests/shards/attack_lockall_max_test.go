package shards_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
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
	d := startDeployment(t, 1)
	ctx := embedtest.Context(t, time.Minute)
	s := session(t, d.newShards(t))
	a := d.nameOn(t, "c0")
	for _, try := range []bool{false, true} {
		var names []string
		for i := range shard.MaxLockAllNames {
			names = append(names, fmt.Sprintf("{%s}/%v-%d", shard.KeyOf(a), try, i))
		}
		lockAll := s.LockAll
		if try {
			lockAll = s.TryLockAll
		}
		ls, err := lockAll(ctx, names...)
		if err != nil {
			t.Errorf("try %v: %d names: %v", try, len(names), err)
			continue
		}
		if n := len(ls.All()); n != len(names) {
			t.Errorf("try %v: %d held, want %d", try, n, len(names))
		}
		if err := ls.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
