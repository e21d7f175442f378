package wire

// This file holds what the tests reach of the keeper and the batcher,
// through the root's testhooks.go and internal/testhook. Nothing else calls
// it; only Hold's waitHeld runs in every keeper, and does nothing unless a
// test held it.

import (
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// BatchBytes is a batch's default request size limit.
const BatchBytes = batchBytes

// Hold makes k wait, before it next connects, until release is called
// (release is idempotent): it lends no connection meanwhile, as a keeper
// slow to reconnect.
func (k *Keeper) Hold() (release func()) {
	h := make(chan struct{})
	k.held.Store(&h)
	var once sync.Once
	return func() {
		once.Do(func() {
			k.held.CompareAndSwap(&h, nil)
			close(h)
		})
	}
}

// waitHeld waits, before the keeper connects, until a test's hold (set by
// Hold; never otherwise) is released; false if the keeper ended first.
func (k *Keeper) waitHeld() bool {
	h := k.held.Load()
	if h == nil {
		return true
	}
	select {
	case <-*h:
		return true
	case <-k.ctx.Done():
		return false
	}
}

// LentConn reports whether k lends a connection, and whether its member
// said it was the leader.
func (k *Keeper) LentConn() (lent, leader bool) {
	c := k.lent.Load().conn
	return c != nil, c != nil && c.at.leader
}

// LendConn makes k lend conn (to the member at addr) to the queue, as if
// its stream ran on it; retire ends that.
func (k *Keeper) LendConn(cli *clientv3.Client, conn *grpc.ClientConn, addr string) (retire func()) {
	c := &Conn{conn: conn, at: endpoint{addr: addr}}
	c.open(cli)
	k.lend(c)
	return c.retire
}

// TestConn wraps conn as the keeper would lend it.
func TestConn(cli *clientv3.Client, conn *grpc.ClientConn) (borrow func() bool, retire, giveBack func(), kv clientv3.KV) {
	c := &Conn{conn: conn}
	c.open(cli)
	return c.borrow, c.retire, c.GiveBack, c.kv
}

// SetBeforeSend sets the function b calls with the queue dirs of each
// batch before it sends it (nil: none).
func (b *Batcher) SetBeforeSend(f func(dirs []string)) {
	if f == nil {
		b.beforeSend.Store(nil)
		return
	}
	hook := func(batch []*batchCall) {
		dirs := make([]string, len(batch))
		for i, c := range batch {
			dirs[i] = c.op.Dir
		}
		f(dirs)
	}
	b.beforeSend.Store(&hook)
}

// Pending returns how many writes wait in b.
func (b *Batcher) Pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pending)
}

// Limits returns b's writes and bytes per batch.
func (b *Batcher) Limits() (ops, bytes int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.maxOps, b.maxBytes
}
