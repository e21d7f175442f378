package etcdlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestAttackLockAllConfirmRace: LockAll(A, B) holds A at once and waits
// for B; B's holder unlocks while A is broken (and retaken by another
// session) at a random moment around it, so the break lands before, at or
// after the confirm. Either LockAll fails with ErrLockLost naming A and
// leaves no key, or it returns a set whose context ends (the loss is
// reported) whenever A was broken; never a set that claims A while another
// session holds it.
func TestAttackLockAllConfirmRace(t *testing.T) {
	ctx := embedtest.Context(t, 3*time.Minute)
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, shared.TestClient(t))
	other := locktest.OpenSession(t, shared.TestClient(t))
	hb := locktest.OpenSession(t, shared.TestClient(t))
	var failed, won, wonLost int
	for i := 0; i < 25; i++ {
		a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
		holderB, err := etcdlock.NewMutex(hb, b).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res := lockAllAsync(ctx, s, a, b)
		waitFor(t, 10*time.Second, "LockAll queued", func() bool { return len(keysUnder(t, cli, b)) == 2 })
		st, err := etcdlock.Describe(ctx, cli, a)
		if err != nil || st.Holder == nil {
			t.Fatalf("A: %+v %v", st, err)
		}
		tokA := st.Holder.Token
		broke := breakAndRetake(t, ctx, cli, other, a, tokA, time.Duration(rand.N(8000))*time.Microsecond)
		time.Sleep(4 * time.Millisecond)
		if err := holderB.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-res
		otherA := <-broke
		if r.err != nil {
			failed++
			checkFailedLockAll(t, ctx, cli, s, i, r.err, a, b)
		} else {
			won++
			select {
			case <-r.ls.Context().Done():
				wonLost++
			case <-time.After(5 * time.Second):
				t.Errorf("round %d: LockAll returned a set, A was broken and retaken (%v), and the set's context did not end", i, otherA != nil)
			}
			_ = r.ls.Unlock(ctx)
		}
		if otherA != nil {
			_ = otherA.Unlock(ctx)
		}
	}
	t.Logf("LockAll failed %d times, returned %d sets (%d of them reported lost)", failed, won, wonLost)
}

// breakAndRetake breaks name's grant tok after a pause of after (a moment
// of the race, not a synchronisation), then takes name on other; the
// channel gets other's lock (nil if either failed).
func breakAndRetake(t *testing.T, ctx context.Context, cli *clientv3.Client, other *etcdlock.Session, name string, tok etcdlock.Token, after time.Duration) <-chan *etcdlock.Lock {
	broke := make(chan *etcdlock.Lock, 1)
	go func() {
		time.Sleep(after)
		if err := etcdlock.Break(ctx, cli, name, tok); err != nil {
			t.Error(err)
			broke <- nil
			return
		}
		l, err := etcdlock.NewMutex(other, name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		broke <- l
	}()
	return broke
}

// checkFailedLockAll checks the error of round i's LockAll(a, b) on s: it
// names a, lost, and no key of s is left on either name.
func checkFailedLockAll(t *testing.T, ctx context.Context, cli *clientv3.Client, s *etcdlock.Session, i int, err error, a, b string) {
	t.Helper()
	if !errors.Is(err, etcdlock.ErrLockLost) || !strings.Contains(err.Error(), a) {
		t.Errorf("round %d: LockAll: %v, want ErrLockLost naming A", i, err)
	}
	for _, n := range []string{a, b} {
		st, err := etcdlock.Describe(ctx, cli, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range append(st.Holders, st.Waiters...) {
			if e.Lease == s.Lease() {
				t.Errorf("round %d: a key of the failed LockAll is left on %s", i, n)
			}
		}
	}
}

// TestAttackLockAllCutAtConfirm: LockAll(A, B) on a session whose only
// path to etcd is cut while it waits for B; B is freed and A broken and
// retaken meanwhile (in one case), then the path restored. LockAll must
// fail with ErrLockLost naming A (broken) or hold both (not broken), and
// leave nothing when it fails.
func TestAttackLockAllCutAtConfirm(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c := embedtest.Start(t)
	direct := c.TestClient(t)
	for _, brk := range []bool{false, true} {
		s, link := cutSession(t, c, 10*time.Second)
		ctx := embedtest.Context(t, time.Minute)
		a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
		holderB := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, direct), b))
		res := lockAllAsync(ctx, s, a, b)
		waitFor(t, 10*time.Second, "LockAll queued", func() bool { return len(keysUnder(t, direct, b)) == 2 })
		link.Cut()
		if err := holderB.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if brk {
			st, err := etcdlock.Describe(ctx, direct, a)
			if err != nil || st.Holder == nil {
				t.Fatalf("A: %+v %v", st, err)
			}
			if err := etcdlock.Break(ctx, direct, a, st.Holder.Token); err != nil {
				t.Fatal(err)
			}
			mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, direct), a))
		}
		time.Sleep(3 * time.Second)
		link.Restore()
		r := <-res
		t.Logf("broken %v: LockAll: %v", brk, r.err)
		if brk {
			if !errors.Is(r.err, etcdlock.ErrLockLost) || !strings.Contains(r.err.Error(), a) {
				t.Errorf("LockAll with A broken: %v, want ErrLockLost naming A", r.err)
			}
			waitFor(t, 10*time.Second, "no key of the LockAll", func() bool {
				return len(keysUnder(t, direct, a)) == 1 && len(keysUnder(t, direct, b)) == 0
			})
			continue
		}
		if r.err != nil {
			t.Errorf("LockAll: %v, want both held", r.err)
			continue
		}
		for _, l := range r.ls.All() {
			if l.Context().Err() != nil {
				t.Errorf("a returned grant already ended: %v", context.Cause(l.Context()))
			}
		}
		if n := len(keysUnder(t, direct, a)) + len(keysUnder(t, direct, b)); n != 2 {
			t.Errorf("%d keys for the set, want 2", n)
		}
		_ = r.ls.Unlock(ctx)
	}
}

// TestAttackLockAllExpiresAtConfirm: the session of LockAll(A, B) is
// lost (its lease revoked by someone else) as B is freed: LockAll fails
// and nothing is held.
func TestAttackLockAllExpiresAtConfirm(t *testing.T) { attackGrantsLockAllExpires(t, false) }

// TestAttackLockAllExpiryCalledLockLost: as TestAttackLockAllExpiresAtConfirm,
// but it also wants the error that Mutex.Lock gives for a lost session
// (ErrSessionExpired; LockAll's errors are documented as Mutex.Lock's), not
// ErrLockLost of a name "lost while the set was awaited", which would send
// a caller to retry on a dead session.
func TestAttackLockAllExpiryCalledLockLost(t *testing.T) { attackGrantsLockAllExpires(t, true) }

func attackGrantsLockAllExpires(t *testing.T, strict bool) {
	cli := shared.TestClient(t)
	for i := 0; i < 10; i++ {
		ctx := embedtest.Context(t, 30*time.Second)
		s := locktest.OpenSession(t, shared.TestClient(t))
		a, b := embedtest.UniqueName(t, "test"), embedtest.UniqueName(t, "test")
		holderB := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), b))
		res := make(chan error, 1)
		go func() {
			ls, err := etcdlock.LockAll(ctx, s, a, b)
			if err == nil && ls.Context().Err() == nil {
				select {
				case <-ls.Context().Done():
				case <-time.After(5 * time.Second):
					err = errors.New("a set returned after the lease was revoked, never reported lost")
				}
			}
			res <- err
		}()
		waitFor(t, 10*time.Second, "LockAll queued", func() bool { return len(keysUnder(t, cli, b)) == 2 })
		go func() { _ = holderB.Unlock(ctx) }()
		time.Sleep(time.Duration(rand.N(3000)) * time.Microsecond)
		if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
			t.Fatal(err)
		}
		err := <-res
		t.Logf("round %d: %v", i, err)
		if err != nil && strict && !errors.Is(err, etcdlock.ErrSessionExpired) {
			t.Errorf("round %d: %v, want ErrSessionExpired (the session's lease was revoked)", i, err)
		}
		if err != nil && !errors.Is(err, etcdlock.ErrSessionExpired) && !errors.Is(err, etcdlock.ErrLockLost) {
			t.Errorf("round %d: %v", i, err)
		}
		if n := len(keysUnder(t, cli, a)) + len(keysUnder(t, cli, b)); n != 0 {
			t.Errorf("round %d: %d keys left", i, n)
		}
	}
}
