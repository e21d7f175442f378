package shards_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// TestMoveUnderLoad: 16 workers lock four names of two slots and write
// through a Fence per name, while both slots move between the clusters
// again and again. No stale token is ever admitted (tokens grow in grant
// order: FIFO within each cluster's epoch, and across every move), no name
// has two holders at once across the two clusters, and every worker keeps
// being granted.
func TestMoveUnderLoad(t *testing.T) {
	t.Parallel() // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, 3*time.Minute)
	r := d.newShards(t)
	k1 := shard.KeyOf(d.nameOn(t, "c0"))
	k2 := shard.KeyOf(d.nameOn(t, "c1"))
	names := []string{k1 + "/a", k1 + "/b", k2 + "/a", "x/{" + k2 + "}"}
	res := map[string]*resource{}
	for _, n := range names {
		res[n] = &resource{}
	}
	stop, cancel := context.WithCancel(ctx)
	errs := make(chan error, 16)
	wg := startWorkers(t, r, 16, stop, names, res, errs)
	moves := 0
	for round := 0; round < 3; round++ {
		for _, k := range []string{k1, k2} {
			to := "c1"
			if id, _ := d.admin.ClusterOf(k); id == "c1" {
				to = "c0"
			}
			before := res[names[0]].grants.Load() + res[names[2]].grants.Load()
			d.move(t, k, to, shard.MoveOptions{})
			moves++
			waitFor(t, 30*time.Second, "grants after the move", func() bool {
				return len(errs) > 0 || res[names[0]].grants.Load()+res[names[2]].grants.Load() > before+2
			})
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for n, rs := range res {
		t.Logf("%s: %d grants, highest token %d (generation %d)", n, rs.grants.Load(), rs.fence.Highest(), rs.fence.Highest().Generation())
		if rs.grants.Load() == 0 {
			t.Errorf("%s was never granted", n)
		}
	}
	t.Logf("%d moves", moves)
}

// resource is what the load test's workers use under a name's lock.
type resource struct {
	fence    etcdlock.Fence
	occupied atomic.Int32
	grants   atomic.Int64
}

// startWorkers starts n workers, each with its own sharded session on r,
// that use the names in turn until stop ends; a worker that fails sends
// its error on errs and stops.
func startWorkers(t *testing.T, r *shard.Shards, n int, stop context.Context, names []string, res map[string]*resource, errs chan<- error) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		s := session(t, r, etcdlock.WithIdentity(fmt.Sprintf("worker-%d", w)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; stop.Err() == nil; i++ {
				n := names[(w+i)%len(names)]
				if err := useOnce(stop, s, n, res[n].fence.Admit, &res[n].occupied); err != nil {
					errs <- fmt.Errorf("worker %d, %s: %w", w, n, err)
					return
				}
				res[n].grants.Add(1)
			}
		}()
	}
	return &wg
}

// holdFor is how long a worker holds: long enough that a holder on the
// source is still there when the name is granted on the target, if a move
// ever let that happen.
const holdFor = 15 * time.Millisecond

// useOnce locks name, admits its token at the resource, checks nobody else
// is inside, and releases. A ctx that ends is not an error.
func useOnce(ctx context.Context, s *shard.Session, name string, admit func(etcdlock.Token) error, occupied *atomic.Int32) error {
	l, err := s.NewMutex(name).Lock(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() { _ = l.Unlock(context.WithoutCancel(ctx)) }()
	if n := occupied.Add(1); n != 1 {
		return fmt.Errorf("%d holders at once (token %d)", n, l.Token())
	}
	defer occupied.Add(-1)
	if err := admit(l.Token()); err != nil {
		if errors.Is(err, etcdlock.ErrStaleToken) {
			return fmt.Errorf("token %d (generation %d) refused: %w", l.Token(), l.Token().Generation(), err)
		}
		return err
	}
	time.Sleep(holdFor) // the work done under the lock
	return nil
}
