package etcdlock

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// This file holds the session's barrier keys, which make a write of unknown
// outcome harmless (DESIGN.md, "Writes of unknown outcome"). A request that
// timed out may still be applied at any later time; nothing bounds the delay.
// So every write that can create a queue key (enqueue, TryLock, TryRLock,
// TryAcquire) also compares the session's barrier of that name:
//
//	etcdlock/<escaped name>%!/<lease hex>   (attached to the session's lease)
//
// with ModRevision(barrier) == the value the session last knew (0: absent).
// To retire writes of unknown outcome the session raises the barrier (a Put,
// so its mod revision grows), THEN reads what exists and deletes it guarded by
// its create revision. In etcd's one linearizable order, a create applied
// before the raise is seen by the read; one applied after it fails its
// compare and writes nothing. No time passes in this argument.
//
// The barrier is never deleted while the lease lives: a deleted barrier
// compares as mod revision 0, the value of writes sent before its first raise.

// barrierGuard returns what every key-creating write of the session in dir
// carries: the comparison with the barrier's mod revision as the session
// knows it (sent; 0 while it knows of none) and, while it knows of none,
// the Put that creates the barrier in the same Txn (creates: nil
// otherwise). So a session has a barrier in every name it holds or waits in,
// from its first key there to the end of its lease, and a watcher of the
// name sees the lease end as the barrier's deletion (see Entry, the status
// page's timeline). A create applied with that Put moves the barrier past 0,
// where a raise would have moved it (see raiseBarrier): a copy of a write
// sent with 0 fails from then on. The caller learns the barrier at the
// revision of a successful Txn sent with 0 (learnBarrier).
func (b *keyBook) barrierGuard(dir string) (cmp clientv3.Cmp, creates []clientv3.Op, sent int64) {
	s := b.s
	sent = b.barrierRev(dir)
	key := barrierKey(dir, s.lease)
	if sent == 0 {
		creates = []clientv3.Op{clientv3.OpPut(key, "", clientv3.WithLease(s.lease))}
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", sent), creates, sent
}

// barrierRev is the barrier's mod revision of dir as the session knows it.
func (b *keyBook) barrierRev(dir string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.barriers[dir]
}

// learnBarrier records mod, a mod revision of dir's barrier read from etcd.
// Mod revisions only grow (a re-created key gets a new one), so the newest wins.
func (b *keyBook) learnBarrier(dir string, mod int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.barriers == nil {
		b.barriers = map[string]int64{}
	}
	if mod > b.barriers[dir] {
		b.barriers[dir] = mod
	}
}

// barrierMoved handles a write of the session in dir that was sent with
// compare value sent and failed a compare; kvs is its Else branch's read of
// the barrier. It records what it read and reports whether the barrier failed
// the compare (the write must be sent again with the new value). A barrier
// that someone deleted is re-created first (see raiseBarrier); the error is
// that raise's.
func (b *keyBook) barrierMoved(ctx context.Context, dir string, sent int64, kvs []*mvccpb.KeyValue) (bool, error) {
	if len(kvs) == 0 {
		if sent == 0 {
			return false, nil
		}
		return true, b.raiseBarrier(ctx, dir)
	}
	b.learnBarrier(dir, kvs[0].ModRevision)
	return kvs[0].ModRevision != sent, nil
}

// raiseBarrier moves dir's barrier past every write of the session sent
// before the call: after it returns nil, no such write can ever be applied.
// One attempt: it returns the request's error when the outcome is unknown
// (the caller retries; a repeated raise is harmless).
func (b *keyBook) raiseBarrier(ctx context.Context, dir string) error {
	s := b.s
	key := barrierKey(dir, s.lease)
	m := b.barrierRev(dir)
	actx, cancel := context.WithTimeout(ctx, wire.AttemptTimeout)
	defer cancel()
	resp, err := s.cli.Txn(actx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", m)).
		Then(clientv3.OpPut(key, "", clientv3.WithLease(s.lease))).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return err
	}
	if resp.Succeeded {
		b.learnBarrier(dir, resp.Header.Revision)
		return nil
	}
	// It had moved already (an earlier raise of ours was applied): any
	// compare with m, or with an older value, fails from now on.
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		// Deleted by someone else: writes sent before its first raise
		// compare equal again. Re-create it at once.
		b.mu.Lock()
		delete(b.barriers, dir)
		b.mu.Unlock()
		return b.raiseBarrier(ctx, dir)
	}
	b.learnBarrier(dir, kvs[0].ModRevision)
	return nil
}
