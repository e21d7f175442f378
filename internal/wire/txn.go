package wire

// This file holds Txn, one write of the queue as it goes over the wire:
// alone, or nested in a batch (batch.go).

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// AttemptTimeout bounds one attempt of a request that the library retries.
// A request caught in flight by an etcd leader crash otherwise waits out
// etcd's own request timeout (5s + 2 election timeouts) before failing; every
// retried request is idempotent.
const AttemptTimeout = 2 * time.Second

// Txn is one write of the queue: a Txn on the keys of one queue (Dir), or
// of several (Dirs, a LockAll's; Dir is then the first of them).
type Txn struct {
	Dir   string
	Dirs  []string
	Cmps  []clientv3.Cmp
	Thens []clientv3.Op
	Elses []clientv3.Op
}

// size estimates the bytes op adds to a request.
func (op Txn) size() int {
	n := 0
	for _, c := range op.Cmps {
		n += len(c.KeyBytes()) + 24
	}
	for _, ops := range [][]clientv3.Op{op.Thens, op.Elses} {
		for _, o := range ops {
			n += len(o.KeyBytes()) + len(o.RangeBytes()) + len(o.ValueBytes()) + 24
		}
	}
	return n
}

// each calls f with every queue op writes in.
func (op Txn) each(f func(dir string)) {
	if op.Dirs == nil {
		f(op.Dir)
		return
	}
	for _, d := range op.Dirs {
		f(d)
	}
}

// Send sends op alone, as a Txn of its own on kv.
func (op Txn) Send(ctx context.Context, kv clientv3.KV) (*clientv3.TxnResponse, error) {
	return kv.Txn(ctx).If(op.Cmps...).Then(op.Thens...).Else(op.Elses...).Commit()
}
