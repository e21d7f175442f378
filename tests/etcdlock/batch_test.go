package etcdlock_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// batchGate holds a client's first batch until n more writes wait behind it,
// so that they leave together in the next batch, and records every batch.
type batchGate struct {
	s        *etcdlock.Session
	release  chan struct{}
	first    atomic.Bool
	openOnce sync.Once

	mu      sync.Mutex
	batches [][]string // the queue dirs of each batch sent
}

func holdFirstBatch(t *testing.T, s *etcdlock.Session) *batchGate {
	t.Helper()
	g := &batchGate{s: s, release: make(chan struct{})}
	hook := func(dirs []string) {
		g.mu.Lock()
		g.batches = append(g.batches, dirs)
		g.mu.Unlock()
		if g.first.CompareAndSwap(false, true) {
			<-g.release
		}
	}
	testhook.BeforeSend(s, hook)
	t.Cleanup(func() {
		testhook.BeforeSend(s, nil)
		g.open()
	})
	return g
}

func (g *batchGate) open() { g.openOnce.Do(func() { close(g.release) }) }

// await waits until the first batch is held and n writes wait behind it.
func (g *batchGate) await(t *testing.T, n int) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%d writes behind the held batch", n), func() bool {
		return g.first.Load() && testhook.Pending(g.s) >= n
	})
}

func (g *batchGate) sizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]int, len(g.batches))
	for i, b := range g.batches {
		out[i] = len(b)
	}
	return out
}

// TestBatchAnswersEachMember: one batch carries writes of three sessions, one
// of whose leases was revoked. etcd refuses the whole batch for that one's
// sake; the batcher splits it, so the others are granted and only that one
// fails (ErrSessionExpired), and the others' sessions live on.
func TestBatchAnswersEachMember(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 60*time.Second)
	a, b, c := locktest.OpenSession(t, cli), locktest.OpenSession(t, cli), locktest.OpenSession(t, cli)
	g := holdFirstBatch(t, a)
	first := lockAsync(ctx, etcdlock.NewMutex(a, embedtest.UniqueName(t, "test")))
	g.await(t, 0)
	if _, err := cli.Revoke(ctx, b.Lease()); err != nil {
		t.Fatal(err)
	}
	ra := lockAsync(ctx, etcdlock.NewMutex(a, embedtest.UniqueName(t, "test")))
	rb := lockAsync(ctx, etcdlock.NewMutex(b, embedtest.UniqueName(t, "test")))
	rc := lockAsync(ctx, etcdlock.NewMutex(c, embedtest.UniqueName(t, "test")))
	g.await(t, 3)
	g.open()
	for _, r := range []<-chan lockResult{first, ra, rc} {
		if got := <-r; got.err != nil {
			t.Fatalf("a live session's Lock in the batch: %v (batches %v)", got.err, g.sizes())
		}
	}
	if got := <-rb; !errors.Is(got.err, etcdlock.ErrSessionExpired) {
		t.Fatalf("the revoked session's Lock: %v, want ErrSessionExpired", got.err)
	}
	if a.Err() != nil || c.Err() != nil {
		t.Fatalf("live sessions ended: %v, %v", a.Err(), c.Err())
	}
	if sizes := g.sizes(); len(sizes) < 2 || sizes[1] != 3 {
		t.Fatalf("batches %v; want the three writes in one batch after the held one", sizes)
	}
}

// TestBatchSplitsPastMaxTxnOps: a batch over the server's --max-txn-ops is
// refused; the batcher splits it, learns a smaller limit, and every write is
// answered.
func TestBatchSplitsPastMaxTxnOps(t *testing.T) {
	const n = 12
	s := sendOversizedBatch(t, n, func(t *testing.T, _ int) string { return embedtest.UniqueName(t, "test") }, embedtest.WithMaxTxnOps(8))
	if ops, _ := testhook.BatchLimits(s); ops >= n {
		t.Fatalf("max writes per batch %d after a refusal of %d", ops, n)
	}
}

// sendOversizedBatch sends n Locks (of names name(i)) as one batch to a
// one-member cluster started with opts, which refuses it; it checks that
// the batch was sent whole, then split, and that every Lock was granted,
// and returns the session.
func sendOversizedBatch(t *testing.T, n int, name func(t *testing.T, i int) string, opts ...embedtest.Option) *etcdlock.Session {
	t.Helper()
	cli := embedtest.Start(t, append([]embedtest.Option{embedtest.WithMembers(1)}, opts...)...).TestClient(t)
	ctx := embedtest.Context(t, 60*time.Second)
	s := locktest.OpenSession(t, cli)
	g := holdFirstBatch(t, s)
	first := lockAsync(ctx, etcdlock.NewMutex(s, embedtest.UniqueName(t, "test")))
	g.await(t, 0)
	rs := make([]<-chan lockResult, n)
	for i := range rs {
		rs[i] = lockAsync(ctx, etcdlock.NewMutex(s, name(t, i)))
	}
	g.await(t, n)
	g.open()
	for _, r := range append(rs, first) {
		if got := <-r; got.err != nil {
			t.Fatalf("Lock in an oversized batch: %v (batches %v)", got.err, g.sizes())
		}
	}
	if sizes := g.sizes(); len(sizes) < 3 || sizes[1] != n {
		t.Fatalf("batches %v; want %d writes in the batch after the held one, then its parts", sizes, n)
	}
	return s
}

// TestBatchNeverTwoOfOneName: writes on one name never share a batch (their
// keys would share the Txn's revision: equal tokens). While a batch is held
// in flight, two enqueues of one name wait: one for the next batch, the
// other goes alone. They get distinct tokens and never hold at once.
func TestBatchNeverTwoOfOneName(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 60*time.Second)
	a, b := locktest.OpenSession(t, cli), locktest.OpenSession(t, cli)
	g := holdFirstBatch(t, a)
	first := lockAsync(ctx, etcdlock.NewMutex(a, embedtest.UniqueName(t, "test")))
	g.await(t, 0)
	name := embedtest.UniqueName(t, "test")
	ra := lockAsync(ctx, etcdlock.NewMutex(a, name))
	g.await(t, 1)
	rb := lockAsync(ctx, etcdlock.NewMutex(b, name))
	other := lockAsync(ctx, etcdlock.NewMutex(b, embedtest.UniqueName(t, "test")))
	g.await(t, 2)
	g.open()
	for _, r := range []<-chan lockResult{first, other} {
		if got := <-r; got.err != nil {
			t.Fatal(got.err)
		}
	}
	var held lockResult
	var next <-chan lockResult
	select {
	case held = <-ra:
		next = rb
	case held = <-rb:
		next = ra
	}
	if held.err != nil {
		t.Fatal(held.err)
	}
	// Both keys are in the queue, with distinct create revisions.
	waitFor(t, 30*time.Second, "the second key", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	resp, err := cli.Get(ctx, layout.NamePrefix(name), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 2 || resp.Kvs[0].CreateRevision == resp.Kvs[1].CreateRevision {
		t.Fatalf("keys of %s: %v; want two with distinct create revisions (batches %v)", name, resp.Kvs, g.sizes())
	}
	select {
	case got := <-next:
		t.Fatalf("the second Lock of %s was granted while the first holds: %+v", name, got)
	default:
	}
	if err := held.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	later := <-next
	if later.err != nil {
		t.Fatal(later.err)
	}
	if later.l.Token() <= held.l.Token() {
		t.Fatalf("tokens %d then %d; want the later grant's larger", held.l.Token(), later.l.Token())
	}
	g.checkOnePerQueue(t)
}

// checkOnePerQueue fails t if a batch carried two writes of one queue.
func (g *batchGate) checkOnePerQueue(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, dirs := range g.batches {
		seen := map[string]bool{}
		for _, d := range dirs {
			if seen[d] {
				t.Fatalf("a batch carried two writes of queue %s: %v", d, dirs)
			}
			seen[d] = true
		}
	}
}

// TestBatchSplitsPastRequestSize: a batch over the server's
// --max-request-bytes is refused as too large; the batcher splits it,
// learns a smaller size, and every write is answered.
func TestBatchSplitsPastRequestSize(t *testing.T) {
	// Each write is a few hundred bytes: about 10 KiB in all.
	s := sendOversizedBatch(t, 40, func(t *testing.T, i int) string {
		return fmt.Sprintf("%s/%02d-%s", embedtest.UniqueName(t, "test"), i, strings.Repeat("x", 60))
	}, embedtest.WithMaxRequestBytes(4096))
	if _, bytes := testhook.BatchLimits(s); bytes >= testhook.BatchBytes {
		t.Fatalf("max bytes per batch %d after a refusal as too large", bytes)
	}
}

// TestBatchReleaseAndEnqueueApart: a release and an enqueue of one name
// never share a batch (a reused slot name would be the same key, which etcd
// refuses to write twice in one Txn): while a batch is held in flight, the
// holder's Unlock waits for the next batch, and another session's Lock of
// the name goes alone; the Lock is then granted after the release.
func TestBatchReleaseAndEnqueueApart(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 60*time.Second)
	a, b := locktest.OpenSession(t, cli), locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	held, err := etcdlock.NewMutex(a, name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g := holdFirstBatch(t, a)
	first := lockAsync(ctx, etcdlock.NewMutex(a, embedtest.UniqueName(t, "test")))
	g.await(t, 0)
	unlocked := make(chan error, 1)
	go func() { unlocked <- held.Unlock(ctx) }()
	g.await(t, 1)
	next := lockAsync(ctx, etcdlock.NewMutex(b, name))
	g.open()
	if err := <-unlocked; err != nil {
		t.Fatal(err)
	}
	for _, r := range []<-chan lockResult{first, next} {
		if got := <-r; got.err != nil {
			t.Fatal(got.err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	dir := layout.NamePrefix(name)
	for _, dirs := range g.batches {
		n := 0
		for _, d := range dirs {
			if d == dir {
				n++
			}
		}
		if n > 1 {
			t.Fatalf("a batch carried %d writes of %s: %v", n, name, g.batches)
		}
	}
}
