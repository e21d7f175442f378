package shards_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// TestTokensGrowAcrossMove: every name of a slot gets a higher token after
// its slot moves, although the target's revisions are far below the
// source's; and again when it moves back.
func TestTokensGrowAcrossMove(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, 2*time.Minute)
	// The source's revisions run far ahead of the target's.
	for i := 0; i < 200; i++ {
		if _, err := d.clients["c0"].Put(ctx, "filler", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	r := d.newShards(t)
	s := session(t, r)
	first := d.nameOn(t, "c0")
	team := shard.KeyOf(first)
	names := []string{first, team + "/a", team + "/b/c", "x/{" + team + "}"}
	last := map[string]etcdlock.Token{}
	takeAll := func(where string) {
		t.Helper()
		for _, n := range names {
			l, err := s.NewMutex(n).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.keysOf(t, where, n)) != 1 {
				t.Fatalf("%s: granted, but not on %s", n, where)
			}
			if l.Token() <= last[n] {
				t.Fatalf("%s: token %d (generation %d, revision %d) after %d (generation %d, revision %d) on the cluster before",
					n, l.Token(), l.Token().Generation(), l.Token().Revision(), last[n], last[n].Generation(), last[n].Revision())
			}
			t.Logf("%s on %s: token %d (generation %d, revision %d)", n, where, l.Token(), l.Token().Generation(), l.Token().Revision())
			last[n] = l.Token()
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	takeAll("c0")
	d.move(t, first, "c1", shard.MoveOptions{}, r)
	takeAll("c1")
	d.move(t, first, "c0", shard.MoveOptions{}, r)
	takeAll("c0")
}

// grantResult is the outcome of a Lock run in the background.
type grantResult struct {
	l   *etcdlock.Lock
	err error
}

func lockAsync(ctx context.Context, m *etcdlock.Mutex) <-chan grantResult {
	ch := make(chan grantResult, 1)
	go func() {
		l, err := m.Lock(ctx)
		ch <- grantResult{l, err}
	}()
	return ch
}

// TestMoveDrainsInOrder: a move waits for the source's queue of the slot to
// drain in FIFO order (the holder, then the waiter queued before the
// freeze, both on the source); a waiter that arrives during the move is not
// refused: it waits for the move and is granted on the target, with a
// higher token.
func TestMoveDrainsInOrder(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, 2*time.Minute)
	r := d.newShards(t)
	name := d.nameOn(t, "c0")
	holder := mustLock(t, session(t, r).NewMutex(name))
	before := lockAsync(ctx, session(t, r).NewMutex(name))
	waitFor(t, 10*time.Second, "the first waiter's key", func() bool { return len(d.keysOf(t, "c0", name)) == 2 })

	phases := make(chan shard.MoveProgress, 100)
	moved := make(chan error, 1)
	go func() {
		moved <- d.admin.MoveSlot(ctx, shard.SlotOf(name), "c1", shard.MoveOptions{
			Progress: func(p shard.MoveProgress) { phases <- p }})
	}()
	awaitPhase(t, phases, "draining", 2)
	during := lockAsync(ctx, session(t, r).NewMutex(name))

	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	g1 := <-before
	if g1.err != nil {
		t.Fatal(g1.err)
	}
	if len(d.keysOf(t, "c0", name)) != 1 || g1.l.Token() <= holder.Token() {
		t.Fatalf("the first waiter: token %d after %d, keys on c0 %v", g1.l.Token(), holder.Token(), d.keysOf(t, "c0", name))
	}
	select {
	case g := <-during:
		t.Fatalf("a waiter that arrived during the move got %v, %v while the source still held the name", g.l, g.err)
	default:
	}
	if err := g1.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-moved; err != nil {
		t.Fatal(err)
	}
	g2 := <-during
	if g2.err != nil {
		t.Fatalf("a waiter that arrived during the move: %v", g2.err)
	}
	if len(d.keysOf(t, "c1", name)) != 1 || g2.l.Token() <= g1.l.Token() {
		t.Fatalf("after the move: token %d (after %d), keys on c1 %v", g2.l.Token(), g1.l.Token(), d.keysOf(t, "c1", name))
	}
	if err := g2.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// awaitPhase waits for the move to report phase with keys keys left.
func awaitPhase(t *testing.T, phases <-chan shard.MoveProgress, phase string, keys int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case p := <-phases:
			if p.Phase == phase && p.Keys == keys {
				return
			}
		case <-timeout:
			t.Fatalf("no %s phase with %d keys", phase, keys)
		}
	}
}

// TestMoveForceAfter: a holder that never lets go is broken once
// ForceAfter passes; it sees ErrLockLost, and the name is granted on the
// target.
func TestMoveForceAfter(t *testing.T) {
	t.Parallel() // touches only its own deployment; mostly waits
	d := startDeployment(t, 1, 1)
	r := d.newShards(t)
	name := d.nameOn(t, "c1")
	stuck := mustLock(t, session(t, r).NewMutex(name))
	d.move(t, name, "c0", shard.MoveOptions{ForceAfter: 500 * time.Millisecond}, r)
	<-stuck.Context().Done()
	if cause := context.Cause(stuck.Context()); !errors.Is(cause, etcdlock.ErrLockLost) {
		t.Fatalf("the broken holder's cause: %v, want ErrLockLost", cause)
	}
	l := mustLock(t, session(t, r).NewMutex(name))
	if len(d.keysOf(t, "c0", name)) != 1 || l.Token() <= stuck.Token() {
		t.Fatalf("after the move: token %d after %d", l.Token(), stuck.Token())
	}
}

// TestMoveBadInput: a move to an unknown cluster, of a slot out of range,
// to where the slot is, and a second move of a slot being moved each get a
// clear error, and the map stays as it was.
func TestMoveBadInput(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	name := d.nameOn(t, "c0")
	slot := shard.SlotOf(name)
	mapRev := func() int64 {
		resp, err := d.root.Get(ctx, "etcdlock-shards/map")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Kvs[0].ModRevision
	}
	rev := mapRev()
	for _, tc := range []struct {
		what string
		slot int
		to   string
		want error
	}{
		{"unknown cluster", slot, "c9", etcdlock.ErrInvalidArgument},
		{"slot below range", -1, "c1", etcdlock.ErrInvalidArgument},
		{"slot above range", shard.NumSlots, "c1", etcdlock.ErrInvalidArgument},
		{"slot already there", slot, "c0", etcdlock.ErrInvalidArgument},
	} {
		t.Run(tc.what, func(t *testing.T) {
			err := d.admin.MoveSlot(ctx, tc.slot, tc.to, shard.MoveOptions{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("MoveSlot = %v, want %v", err, tc.want)
			}
			t.Log(err)
		})
	}
	// A second move while the first drains.
	r := d.newShards(t)
	holder := mustLock(t, session(t, r).NewMutex(name))
	phases := make(chan shard.MoveProgress, 100)
	first := make(chan error, 1)
	go func() {
		first <- d.admin.MoveSlot(ctx, slot, "c1", shard.MoveOptions{Progress: func(p shard.MoveProgress) { phases <- p }})
	}()
	awaitPhase(t, phases, "draining", 1)
	for _, to := range []string{"c1", "c0"} {
		err := d.admin.MoveSlot(ctx, slot, to, shard.MoveOptions{})
		if !errors.Is(err, shard.ErrMoveInProgress) {
			t.Fatalf("a second move to %s = %v, want ErrMoveInProgress", to, err)
		}
		t.Log(err)
	}
	if got := mapRev(); got != rev {
		t.Fatalf("the map changed (mod revision %d, was %d)", got, rev)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// mustLock locks m or fails the test.
func mustLock(t testing.TB, m *etcdlock.Mutex) *etcdlock.Lock {
	t.Helper()
	l, err := m.Lock(embedtest.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("lock %q: %v", m.Name(), err)
	}
	return l
}

// TestRaiseGeneration: after RaiseGeneration (as after a restore from a
// snapshot) a session that knew the old stamp has its next write refused,
// sends it again under the new stamp, and its token carries the raised
// generation, above every token before.
func TestRaiseGeneration(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	m := session(t, d.newShards(t)).NewMutex(d.nameOn(t, "c1"))
	before := mustLock(t, m)
	if err := before.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := d.admin.RaiseGeneration(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	after := mustLock(t, m)
	if after.Token().Generation() != g || g <= before.Token().Generation() || after.Token() <= before.Token() {
		t.Fatalf("token %d (generation %d) after raising to %d; before: %d (generation %d)",
			after.Token(), after.Token().Generation(), g, before.Token(), before.Token().Generation())
	}
	if _, err := d.admin.RaiseGeneration(ctx, "c9"); !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("RaiseGeneration of an unknown cluster: %v", err)
	}
}

// TestMoveResume: a move stopped in its drain (its ctx ended) leaves the
// slot frozen and its record in place: a new acquisition waits, a second
// move without Resume is refused, and a move with Resume finishes it.
func TestMoveResume(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	r := d.newShards(t)
	name := d.nameOn(t, "c0")
	holder := mustLock(t, session(t, r).NewMutex(name))
	phases := make(chan shard.MoveProgress, 100)
	mctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() {
		stopped <- d.admin.MoveSlot(mctx, shard.SlotOf(name), "c1", shard.MoveOptions{Progress: func(p shard.MoveProgress) { phases <- p }})
	}()
	awaitPhase(t, phases, "draining", 1)
	stop()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped move: %v", err)
	}
	waiter := lockAsync(ctx, session(t, r).NewMutex(name))
	if err := d.admin.MoveSlot(ctx, shard.SlotOf(name), "c1", shard.MoveOptions{}); !errors.Is(err, shard.ErrMoveInProgress) {
		t.Fatalf("a move without Resume: %v", err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-waiter:
		t.Fatalf("granted while the slot is frozen: %v, %v", g.l, g.err)
	default:
	}
	if err := d.admin.MoveSlot(ctx, shard.SlotOf(name), "c1", shard.MoveOptions{Resume: true}); err != nil {
		t.Fatal(err)
	}
	g := <-waiter
	if g.err != nil || len(d.keysOf(t, "c1", name)) != 1 || g.l.Token() <= holder.Token() {
		t.Fatalf("after the resumed move: %v, token %d (after %d)", g.err, g.l.Token(), holder.Token())
	}
}
