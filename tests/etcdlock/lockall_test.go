package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// nameKey is the queue prefix of name without its end: what a grant's key
// starts with.
func nameKey(name string) string { return strings.TrimSuffix(layout.NamePrefix(name), "%/") }

// occupancyKey is where lockAllRounds marks a name held, to see holders of
// two processes overlap.
func occupancyKey(name string) string { return "test-occupancy/" + name }

// holderCounts counts the holders of each name in one process.
type holderCounts map[string]*atomic.Int32

// lockAllRounds takes names with LockAll (and, every third round, each name
// alone with a plain Lock) rounds times. Each grant marks the name's
// occupancy key with its own id (guarded by the grant, and only if the key
// says "free") and frees it before the release, so holders that overlap,
// in any process, fail; counts, when set, checks the same in this process.
func lockAllRounds(ctx context.Context, s *etcdlock.Session, names []string, rounds int, counts holderCounts) error {
	for i := range rounds {
		if i%3 == 2 {
			for _, name := range names {
				l, err := etcdlock.NewMutex(s, name).Lock(ctx)
				if err != nil {
					return fmt.Errorf("round %d: lock %s: %w", i, name, err)
				}
				if err := occupy(ctx, s, []*etcdlock.Lock{l}, counts); err != nil {
					return fmt.Errorf("round %d: %w", i, err)
				}
				if err := l.Unlock(ctx); err != nil {
					return err
				}
			}
			continue
		}
		ls, err := etcdlock.LockAll(ctx, s, names...)
		if err != nil {
			return fmt.Errorf("round %d: LockAll %v: %w", i, names, err)
		}
		if err := occupy(ctx, s, ls.All(), counts); err != nil {
			return fmt.Errorf("round %d: %w", i, err)
		}
		if err := ls.Unlock(ctx); err != nil {
			return err
		}
	}
	return nil
}

// occupy marks each grant's name occupied, then free again.
func occupy(ctx context.Context, s *etcdlock.Session, ls []*etcdlock.Lock, counts holderCounts) error {
	id := fmt.Sprintf("%x-%d", int64(s.Lease()), ls[0].Token())
	for _, l := range ls {
		name := l.Key()[:strings.LastIndex(l.Key(), "%/")]
		if counts != nil {
			c := counts[name]
			if n := c.Add(1); n != 1 {
				return fmt.Errorf("%d holders of %s in this process", n, name)
			}
			defer c.Add(-1)
		}
		occ := occupancyKey(name)
		resp, err := s.Client().Txn(ctx).If(l.Guard(), clientv3.Compare(clientv3.Value(occ), "=", "free")).
			Then(clientv3.OpPut(occ, id)).Else(clientv3.OpGet(occ)).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return fmt.Errorf("%s is occupied (%v) while token %d holds it", name, resp.Responses[0].GetResponseRange().Kvs, l.Token())
		}
		defer s.Client().Put(ctx, occ, "free")
	}
	return nil
}

// TestLockAllNeverDeadlocks: a child process takes (a, b) with LockAll 100
// times while this process takes (b, a) 100 times, with plain Locks of a
// and b mixed into both. Nothing deadlocks (both finish within the test's
// time), and the holders of a name never overlap, in this process or
// across both.
func TestLockAllNeverDeadlocks(t *testing.T) {
	const rounds = 100
	base := embedtest.UniqueName(t, "test")
	a, b := base+"/a", base+"/b"
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 3*time.Minute)
	counts := holderCounts{}
	for _, name := range []string{a, b} {
		counts[nameKey(name)] = new(atomic.Int32)
		if _, err := cli.Put(ctx, occupancyKey(nameKey(name)), "free"); err != nil {
			t.Fatal(err)
		}
	}
	cmd, out := startChild(t, "lockall", "NAME="+a+","+b, "TTL=10s", fmt.Sprintf("ROUNDS=%d", rounds))
	childDone := make(chan error, 1)
	go func() {
		line, err := out.ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "DONE" {
			err = fmt.Errorf("child said %q", line)
		}
		if werr := cmd.Wait(); err == nil {
			err = werr
		}
		childDone <- err
	}()
	s1, s2 := locktest.OpenSession(t, cli), locktest.OpenSession(t, shared.TestClient(t))
	mine := make(chan error, 2)
	go func() { mine <- lockAllRounds(ctx, s1, []string{b, a}, rounds, counts) }()
	go func() { mine <- lockAllRounds(ctx, s2, []string{a, b}, rounds/2, counts) }()
	for range 2 {
		if err := <-mine; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-childDone; err != nil {
		t.Fatalf("child process: %v", err)
	}
	for _, name := range []string{a, b} {
		if keys := keysUnder(t, cli, name); len(keys) != 0 {
			t.Fatalf("keys left under %s: %v", name, keys)
		}
	}
}

// TestLockAllQueuesFairly: LockAll waits in each name's FIFO queue (behind
// a holder of one name), is granted when that holder releases, with one
// token for all names, above every earlier token of each; a plain Lock
// that came after waits behind it.
func TestLockAllQueuesFairly(t *testing.T) {
	base := embedtest.UniqueName(t, "test")
	a, b := base+"/a", base+"/b"
	s, other := locktest.OpenSession(t, shared.TestClient(t)), locktest.OpenSession(t, shared.TestClient(t))
	ctx := embedtest.Context(t, 30*time.Second)
	holder := mustLock(t, etcdlock.NewMutex(other, b))
	got := make(chan *etcdlock.Locks, 1)
	go func() {
		ls, err := etcdlock.LockAll(ctx, s, a, b)
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	waitFor(t, 10*time.Second, "LockAll's keys", func() bool {
		return len(keysUnder(t, s.Client(), a)) == 1 && len(keysUnder(t, s.Client(), b)) == 2
	})
	later := make(chan etcdlock.Token, 1)
	go func() {
		l, err := etcdlock.NewMutex(other, a).Lock(ctx)
		if err != nil {
			t.Error(err)
			later <- 0
			return
		}
		later <- l.Token()
		_ = l.Unlock(ctx)
	}()
	waitFor(t, 10*time.Second, "the later Lock's key", func() bool { return len(keysUnder(t, s.Client(), a)) == 2 })
	select {
	case <-got:
		t.Fatal("LockAll granted while b is held")
	default:
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ls := <-got
	if ls == nil {
		t.FailNow()
	}
	checkSet(t, ctx, ls, a, b, holder.Token())
	if tok := <-later; tok <= ls.Lock(a).Token() {
		t.Fatalf("the later Lock's token %d <= LockAll's %d", tok, ls.Lock(a).Token())
	}
}

// checkSet checks the grants of LockAll(a, b), granted after a holder of
// token above, and releases them.
func checkSet(t *testing.T, ctx context.Context, ls *etcdlock.Locks, a, b string, above etcdlock.Token) {
	t.Helper()
	la, lb := ls.Lock(a), ls.Lock(b)
	if la == nil || lb == nil || ls.Lock("nope") != nil || la.Token() != lb.Token() || la.Token() <= above {
		t.Fatalf("grants %v %v; want one token above the holder's %d", la, lb, above)
	}
	if all := ls.All(); len(all) != 2 || all[0] != la || all[1] != lb {
		t.Fatalf("All: %v", all)
	}
	if err := ls.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(ls.Context()), etcdlock.ErrReleased) {
		t.Fatalf("Locks.Context after Unlock: %v", context.Cause(ls.Context()))
	}
}

// TestLockAllLeavesNothingOnFailure: a TryLockAll with one name held writes
// nothing at all, and a LockAll whose ctx ends while it waits for that name
// removes its keys of every name.
func TestLockAllLeavesNothingOnFailure(t *testing.T) {
	base := embedtest.UniqueName(t, "test")
	names := []string{base + "/a", base + "/b", base + "/c"}
	s, other := locktest.OpenSession(t, shared.TestClient(t)), locktest.OpenSession(t, shared.TestClient(t))
	cli := s.Client()
	ctx := embedtest.Context(t, 30*time.Second)
	holder := mustLock(t, etcdlock.NewMutex(other, names[1]))
	assertOnlyHolder := func(what string) {
		t.Helper()
		for _, name := range names {
			want := 0
			if name == names[1] {
				want = 1
			}
			if keys := keysUnder(t, cli, name); len(keys) != want {
				t.Fatalf("%s: keys under %s: %v", what, name, keys)
			}
			bp := layout.BarrierPrefix(name)
			resp, err := cli.Get(ctx, bp+fmt.Sprintf("%x", int64(s.Lease())))
			if err != nil {
				t.Fatal(err)
			}
			if what == "TryLockAll" && len(resp.Kvs) != 0 {
				t.Fatalf("TryLockAll wrote a barrier under %s", name)
			}
		}
	}
	_, err := etcdlock.TryLockAll(ctx, s, names...)
	if !errors.Is(err, etcdlock.ErrLocked) || !strings.Contains(err.Error(), names[1]) {
		t.Fatalf("TryLockAll with %s held: %v", names[1], err)
	}
	assertOnlyHolder("TryLockAll")

	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := etcdlock.LockAll(wctx, s, names...); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockAll whose ctx ends: %v", err)
	}
	assertOnlyHolder("LockAll")
	_ = holder.Unlock(ctx)
}

// TestLockAllRefusesBadInput: too many names, a name given twice and no
// names are ErrInvalidArgument, with nothing written; the most names are
// taken.
func TestLockAllRefusesBadInput(t *testing.T) {
	base := embedtest.UniqueName(t, "test")
	s := locktest.OpenSession(t, shared.TestClient(t))
	cli := s.Client()
	ctx := embedtest.Context(t, 30*time.Second)
	many := make([]string, etcdlock.MaxLockAllNames+1)
	for i := range many {
		many[i] = fmt.Sprintf("%s/many/%d", base, i)
	}
	for _, tc := range []struct {
		what  string
		names []string
	}{{"too many", many}, {"twice", []string{base, base}}, {"none", nil}} {
		t.Run(tc.what, func(t *testing.T) {
			for _, f := range []func(context.Context, *etcdlock.Session, ...string) (*etcdlock.Locks, error){etcdlock.LockAll, etcdlock.TryLockAll} {
				if _, err := f(ctx, s, tc.names...); !errors.Is(err, etcdlock.ErrInvalidArgument) {
					t.Fatalf("%s: %v, want ErrInvalidArgument", tc.what, err)
				}
			}
		})
	}
	resp, err := cli.Get(ctx, layout.NamePrefix(base+"/many"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("keys under the many names: %v %v", resp.Count, err)
	}
	if keys := keysUnder(t, cli, base); len(keys) != 0 {
		t.Fatalf("keys under %s: %v", base, keys)
	}
	// A full set is taken.
	ls, err := etcdlock.TryLockAll(ctx, s, many[:etcdlock.MaxLockAllNames]...)
	if err != nil {
		t.Fatalf("TryLockAll of %d names: %v", etcdlock.MaxLockAllNames, err)
	}
	if err := ls.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
