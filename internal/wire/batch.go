package wire

// This file holds group commit: a client's batcher sends the queue's writes
// of all the client's sessions as nested Txns of one outer Txn, so many
// grants, releases and touches share one etcd commit (DESIGN.md, "Group
// commit"). Batching is natural: with nothing in flight a write leaves at
// once, from its caller's goroutine; while a batch is in flight, new writes
// wait and leave together when it returns, or when they fill a batch.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// Limits of one batch until the server refuses one (see shrink). etcd's
// defaults are 128 operations per Txn level (--max-txn-ops), where a nested
// Txn may use only what its parent leaves (our writes need at most 3), and
// a 1.5 MiB request.
const (
	batchOps   = 120
	batchBytes = 1 << 20
)

// ErrBatcherStopped: the batcher stopped before the write was sent (the
// caller sends it itself).
var ErrBatcherStopped = errors.New("etcdlock: batcher stopped")

// Batcher is the group commit of one keeper's client (Keeper.Batcher). Its
// goroutine (run) is owned by the keeper. It is safe for concurrent use.
type Batcher struct {
	k *Keeper // for the leader's connection

	mu       sync.Mutex
	pending  []*batchCall   // not yet sent, oldest first
	waiting  map[string]int // queue dir -> its writes in pending
	flying   map[string]int // queue dir -> its writes in flight
	inflight int            // batches in flight
	stopped  bool
	maxOps   int // writes per batch; shrinks when the server refuses
	maxBytes int // request size; shrinks when the server refuses
	kick     chan struct{}

	// beforeSend, when set (by tests only), is called with each batch
	// before it is sent.
	beforeSend atomic.Pointer[func([]*batchCall)]
}

// batchCall is one write waiting for its answer.
type batchCall struct {
	op      Txn
	batched func(size int) // the writing session's report of its batch's size
	size    int
	sent    bool // taken into a batch (guarded by the batcher's mu)
	done    chan struct{}
	resp    *clientv3.TxnResponse
	err     error
}

func newBatcher(k *Keeper) *Batcher {
	return &Batcher{k: k, waiting: map[string]int{}, flying: map[string]int{}, maxOps: batchOps, maxBytes: batchBytes, kick: make(chan struct{}, 1)}
}

// Do sends op and returns its answer: at once, from this goroutine, when no
// batch is in flight; else in the next batch, unless a write of its queue
// is in flight or waits for the next batch: then alone, at once. Never two
// writes of one queue in a batch: all keys created in one Txn share its revision, so two grants
// of one name would carry equal tokens and tie in the queue's order; and a
// release and the next enqueue of a reused slot name write the same key,
// which etcd refuses in one Txn. (Sent alone, a hot lock's writes, its
// release and the waiters' enqueues, do not wait for each other's batches
// either: the hand-off is not delayed.) A LockAll's write (op.Dirs) is
// always sent alone, at once, and counts in flight for each of its queues: a
// nested Txn may use only the operations its parent leaves, and a LockAll
// carries up to three per name. When ctx ends
// before op was sent, it is never sent (ctx's error); after, its outcome is
// unknown. It returns ErrBatcherStopped, without sending, once the batcher
// stopped. Once op was sent, Do calls batched with the number of writes of
// its batch (the session's Observer.Batched).
func (b *Batcher) Do(ctx context.Context, op Txn, batched func(size int)) (*clientv3.TxnResponse, error) {
	c := &batchCall{op: op, batched: batched, size: op.size(), done: make(chan struct{})}
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return nil, ErrBatcherStopped
	}
	if op.Dirs != nil || b.waiting[op.Dir] > 0 || b.flying[op.Dir] > 0 {
		b.fly(c)
		b.mu.Unlock()
		b.send(ctx, []*batchCall{c})
		b.landed([]*batchCall{c})
		return c.resp, c.err
	}
	if b.inflight == 0 && len(b.pending) == 0 {
		b.inflight++
		b.fly(c)
		b.mu.Unlock()
		b.send(ctx, []*batchCall{c})
		b.landed([]*batchCall{c})
		b.idle()
		return c.resp, c.err
	}
	b.pending = append(b.pending, c)
	b.waiting[op.Dir]++
	ready := len(b.pending) >= b.maxOps || b.inflight == 0
	b.mu.Unlock()
	if ready {
		b.wake()
	}
	select {
	case <-c.done:
		return c.resp, c.err
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-c.done: // answered meanwhile
		return c.resp, c.err
	default:
	}
	if !c.sent {
		for i, p := range b.pending {
			if p == c {
				b.pending = append(b.pending[:i], b.pending[i+1:]...)
				b.unwait(c)
				break
			}
		}
	}
	return nil, ctx.Err()
}

// run sends batches until ctx ends; then the writes not sent are answered
// ErrBatcherStopped (their callers send them themselves). A batch leaves
// when the one in flight returns, or at once when it is full; each is sent
// from a goroutine run owns.
func (b *Batcher) run(ctx context.Context) {
	var sends sync.WaitGroup
	defer sends.Wait()
	for {
		select {
		case <-b.kick:
		case <-ctx.Done():
			b.mu.Lock()
			b.stopped = true
			rest := b.pending
			b.pending = nil
			clear(b.waiting)
			b.mu.Unlock()
			for _, c := range rest {
				c.answer(nil, ErrBatcherStopped, 0)
			}
			return
		}
		for batch := b.take(); len(batch) > 0; batch = b.take() {
			sends.Add(1)
			go func() {
				defer sends.Done()
				b.send(ctx, batch)
				b.landed(batch)
				b.idle()
			}()
		}
	}
}

// fly marks c sent, in flight. b.mu is held.
func (b *Batcher) fly(c *batchCall) {
	c.sent = true
	c.op.each(func(dir string) { b.flying[dir]++ })
}

// landed counts the writes of batch out of flight.
func (b *Batcher) landed(batch []*batchCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range batch {
		c.op.each(func(dir string) {
			if b.flying[dir]--; b.flying[dir] <= 0 {
				delete(b.flying, dir)
			}
		})
	}
}

// unwait counts c out of pending. b.mu is held.
func (b *Batcher) unwait(c *batchCall) {
	if b.waiting[c.op.Dir]--; b.waiting[c.op.Dir] <= 0 {
		delete(b.waiting, c.op.Dir)
	}
}

// idle ends a batch in flight, and wakes run for the writes that came
// meanwhile.
func (b *Batcher) idle() {
	b.mu.Lock()
	b.inflight--
	more := len(b.pending) > 0
	b.mu.Unlock()
	if more {
		b.wake()
	}
}

func (b *Batcher) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// take returns the next batch, unless one is in flight and the pending
// writes do not fill one: the oldest pending writes, at most maxOps of them
// within maxBytes. Pending never holds two
// writes of one queue (do sends the second alone), so neither does a batch.
// A write passed over keeps its place for the next batch.
func (b *Batcher) take() []*batchCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 || (b.inflight > 0 && len(b.pending) < b.maxOps) {
		return nil
	}
	b.inflight++
	var batch []*batchCall
	size := 0
	rest := b.pending[:0]
	for _, c := range b.pending {
		if len(batch) < b.maxOps && (len(batch) == 0 || size+c.size <= b.maxBytes) {
			batch = append(batch, c)
			size += c.size
			b.unwait(c)
			b.fly(c)
			continue
		}
		rest = append(rest, c)
	}
	clear(b.pending[len(rest):])
	b.pending = rest
	return batch
}

// send commits batch and answers each of its writes. When the server
// refuses the whole batch for one write's sake (its lease not found, a
// permission, too many operations, too large), nothing of it was applied:
// it splits the batch and sends the halves, so that each write gets its own
// answer. An unknown outcome is every write's.
func (b *Batcher) send(ctx context.Context, batch []*batchCall) {
	if h := b.beforeSend.Load(); h != nil {
		(*h)(batch)
	}
	resp, err := b.commit(ctx, batch)
	switch {
	case err == nil:
		if len(batch) == 1 {
			batch[0].answer(resp, nil, 1)
			return
		}
		for i, c := range batch {
			r := (*clientv3.TxnResponse)(resp.Responses[i].GetResponseTxn())
			r.Header = resp.Header // nested answers carry no header of their own
			c.answer(r, nil, len(batch))
		}
	case len(batch) > 1 && splittable(err):
		b.shrink(err, batch)
		half := len(batch) / 2
		b.send(ctx, batch[:half])
		b.send(ctx, batch[half:])
	default:
		for _, c := range batch {
			c.answer(nil, err, len(batch))
		}
	}
}

// commit sends one batch over the keeper's connection while it lends one,
// else the client's: a lone write as a Txn of its own, more as nested Txns
// of one.
func (b *Batcher) commit(ctx context.Context, batch []*batchCall) (*clientv3.TxnResponse, error) {
	actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
	defer cancel()
	var kv clientv3.KV = b.k.cli
	if lc := b.k.Borrow(); lc != nil {
		defer lc.GiveBack()
		kv = lc.kv
	}
	if len(batch) == 1 {
		return batch[0].op.Send(actx, kv)
	}
	ops := make([]clientv3.Op, len(batch))
	for i, c := range batch {
		ops[i] = clientv3.OpTxn(c.op.Cmps, c.op.Thens, c.op.Elses)
	}
	return kv.Txn(actx).Then(ops...).Commit()
}

// splittable reports a refusal of a whole batch that may concern only some
// of its writes: nothing of the batch was applied.
func splittable(err error) bool {
	switch Classify(err) {
	case LeaseGone, Refused:
		return true
	}
	return false
}

// shrink learns the server's limits from a refusal of batch: too many
// operations or too large shrink the batches to half of this one; a refusal
// that concerns one write (its lease, a permission, credentials) changes nothing; any
// other (a server that refuses nested Txns) halves the writes per batch, so
// that it falls back to one request per write.
func (b *Batcher) shrink(err error, batch []*batchCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge):
		size := 0
		for _, c := range batch {
			size += c.size
		}
		b.maxBytes = max(1, min(b.maxBytes, size/2))
	case Classify(err) == LeaseGone || codeOf(err) == codes.PermissionDenied || codeOf(err) == codes.Unauthenticated:
	default: // too many operations, or nested Txns refused
		b.maxOps = max(1, min(b.maxOps, len(batch)/2))
	}
}

// answer hands the call its answer from a batch of size writes (0: none
// was sent).
func (c *batchCall) answer(resp *clientv3.TxnResponse, err error, size int) {
	if size > 0 {
		c.batched(size)
	}
	c.resp, c.err = resp, err
	close(c.done)
}
