package main

// This file holds the lockall scenario: a grant of 8 names at once, by one
// LockAll against 8 Locks in a row, with etcd's concurrency.Mutex (8 in a
// row) and the floor (one Txn of 8 Puts, one of 8 Deletes) in the same run.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// setSize is how many names one grant of the lockall scenario takes.
const setSize = 8

// lockAllScenario runs the lockall cells: each worker its own 8 names
// (lockall), and every worker the same 8 names (lockall-hot; LockAll
// names them in a random order per grant, the others in sorted order,
// without which 8 Locks in a row could deadlock).
func lockAllScenario(ctx context.Context, c *embedtest.Cluster, o options) []Result {
	saved := contestants
	defer func() { contestants = saved }()
	contestants = []contestant{setLimit, setEtcd, setOurs("locks-8", false), setOurs("lockall-8", true)}
	var rs []Result
	for _, n := range o.counts([]int{1, 16}) {
		rs = append(rs, cell(ctx, c, o, "lockall", n, false)...)
	}
	for _, n := range o.counts([]int{4, 16}) {
		rs = append(rs, cell(ctx, c, o, "lockall-hot", n, true)...)
	}
	for i := range rs {
		rs[i].Note = "grants of 8 names"
	}
	return rs
}

// setNames returns the 8 names of a set.
func setNames(lock string) []string {
	names := make([]string, setSize)
	for i := range names {
		names[i] = fmt.Sprintf("%s/%d", lock, i)
	}
	return names
}

// setLimit is the floor: one Txn creates 8 keys, one deletes them.
var setLimit = contestant{"limit", func(ctx context.Context, cli *clientv3.Client) (func(string, int) worker, func(), error) {
	return func(lock string, id int) worker {
		return &setLimitWorker{kv: cli, keys: setNames(fmt.Sprintf("bench-limit/%s/%d", lock, id))}
	}, func() {}, nil
}}

type setLimitWorker struct {
	kv   clientv3.KV
	keys []string
}

func (w *setLimitWorker) txn(ctx context.Context, op func(string) clientv3.Op) error {
	ops := make([]clientv3.Op, len(w.keys))
	for i, k := range w.keys {
		ops[i] = op(k)
	}
	_, err := w.kv.Txn(ctx).Then(ops...).Commit()
	return err
}

func (w *setLimitWorker) acquire(ctx context.Context) error {
	return w.txn(ctx, func(k string) clientv3.Op { return clientv3.OpPut(k, "") })
}

func (w *setLimitWorker) release(ctx context.Context) error {
	return w.txn(ctx, func(k string) clientv3.Op { return clientv3.OpDelete(k) })
}

// setEtcd locks 8 concurrency.Mutexes of one session in a row, sorted.
var setEtcd = etcdContestant("etcd", func(s *concurrency.Session, lock string) worker {
	w := &setEtcdWorker{}
	for _, name := range setNames("/bench-etcd/" + lock) {
		w.ms = append(w.ms, concurrency.NewMutex(s, name))
	}
	return w
})

type setEtcdWorker struct{ ms []*concurrency.Mutex }

func (w *setEtcdWorker) acquire(ctx context.Context) error {
	for i, m := range w.ms {
		if err := m.Lock(ctx); err != nil {
			for _, held := range w.ms[:i] {
				_ = held.Unlock(context.Background())
			}
			return err
		}
	}
	return nil
}

func (w *setEtcdWorker) release(ctx context.Context) error {
	for _, m := range w.ms {
		if err := m.Unlock(ctx); err != nil {
			return err
		}
	}
	return nil
}

// setOurs takes 8 names on one session per worker: with LockAll (all), in
// a random order, or with 8 Locks in a row, sorted.
func setOurs(name string, all bool) contestant {
	return oursWith(name, func(s *etcdlock.Session, lock string) worker {
		return &setOurWorker{s: s, names: setNames("bench/" + lock), all: all}
	})
}

type setOurWorker struct {
	s     *etcdlock.Session
	names []string
	all   bool
	held  []*etcdlock.Lock
	set   *etcdlock.Locks
}

func (w *setOurWorker) acquire(ctx context.Context) error {
	if w.all {
		names := slices.Clone(w.names)
		rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		ls, err := etcdlock.LockAll(ctx, w.s, names...)
		w.set = ls
		return err
	}
	w.held = w.held[:0]
	for _, name := range w.names {
		l, err := etcdlock.NewMutex(w.s, name).Lock(ctx)
		if err != nil {
			for _, h := range w.held {
				_ = h.Unlock(context.Background())
			}
			return err
		}
		w.held = append(w.held, l)
	}
	return nil
}

func (w *setOurWorker) release(ctx context.Context) error {
	if w.all {
		return w.set.Unlock(ctx)
	}
	for _, l := range w.held {
		if err := l.Unlock(ctx); err != nil {
			return err
		}
	}
	return nil
}
