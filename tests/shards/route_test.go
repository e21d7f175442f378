package shards_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
)

// TestShardedRecipes: each recipe on a sharded session takes its name on
// the cluster the map gives its slot, and nowhere else; tokens carry that
// cluster's generation; Describe and List say where a name lives.
func TestShardedRecipes(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	s := session(t, d.newShards(t))
	ctx := embedtest.Context(t, time.Minute)
	for _, id := range d.ids {
		other := d.ids[0]
		if id == other {
			other = d.ids[1]
		}
		t.Run(id, func(t *testing.T) {
			takes := map[string]func(name string) (etcdlock.Token, func() error, error){
				"mutex": func(name string) (etcdlock.Token, func() error, error) {
					l, err := s.NewMutex(name).Lock(ctx)
					return tokenOf(ctx, l, err)
				},
				"rwmutex-read": func(name string) (etcdlock.Token, func() error, error) {
					l, err := s.NewRWMutex(name).RLock(ctx)
					return tokenOf(ctx, l, err)
				},
				"semaphore": func(name string) (etcdlock.Token, func() error, error) {
					l, err := s.NewSemaphore(name, 2).TryAcquire(ctx)
					return tokenOf(ctx, l, err)
				},
				"election": func(name string) (etcdlock.Token, func() error, error) {
					l, err := s.NewElection(name).Campaign(ctx, "v")
					if err != nil {
						return 0, nil, err
					}
					return l.Token(), func() error { return l.Resign(ctx) }, nil
				},
			}
			for kind, take := range takes {
				name := d.nameOn(t, id)
				tok, release, err := take(name)
				if err != nil {
					t.Fatalf("%s: %v", kind, err)
				}
				d.checkPlaced(t, ctx, kind, name, id, other, tok)
				if err := release(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// checkPlaced checks that name's one key is on id and not on other, that
// tok carries a generation, and that Describe reports it so.
func (d *deployment) checkPlaced(t *testing.T, ctx context.Context, kind, name, id, other string, tok etcdlock.Token) {
	t.Helper()
	if len(d.keysOf(t, id, name)) != 1 || len(d.keysOf(t, other, name)) != 0 {
		t.Fatalf("%s: keys on %s: %v, on %s: %v; want one on %s only", kind, id, d.keysOf(t, id, name), other, d.keysOf(t, other, name), id)
	}
	if tok.Generation() < 1 {
		t.Fatalf("%s: token %d has generation %d, want >= 1", kind, tok, tok.Generation())
	}
	st, err := d.admin.Describe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Cluster != id || st.Slot != shard.SlotOf(name) || st.Holder == nil || st.Holder.Token != tok || st.Generation != tok.Generation() {
		t.Fatalf("%s: Describe = cluster %s slot %d generation %d holder %+v; want %s, %d, %d, token %d",
			kind, st.Cluster, st.Slot, st.Generation, st.Holder, id, shard.SlotOf(name), tok.Generation(), tok)
	}
}

func tokenOf(ctx context.Context, l *etcdlock.Lock, err error) (etcdlock.Token, func() error, error) {
	if err != nil {
		return 0, nil, err
	}
	return l.Token(), func() error { return l.Unlock(ctx) }, nil
}

// TestShardKeyKeepsATeamTogether: names with one shard key share a slot, so
// LockAll takes them on one cluster; names on two clusters are refused,
// with nothing written.
func TestShardKeyKeepsATeamTogether(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	s := session(t, d.newShards(t))
	ctx := embedtest.Context(t, time.Minute)
	a := d.nameOn(t, "c1")
	team := shard.KeyOf(a)
	b, c := team+"/jobs/nightly", "orders/{"+team+"}"
	ls, err := s.LockAll(ctx, a, b, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{a, b, c} {
		if len(d.keysOf(t, "c1", n)) != 1 {
			t.Fatalf("%s has no key on c1", n)
		}
	}
	if err := ls.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	elsewhere := d.nameOn(t, "c0")
	if _, err := s.LockAll(ctx, a, elsewhere); !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("LockAll over two clusters = %v, want ErrInvalidArgument", err)
	}
	if k := append(d.keysOf(t, "c1", a), d.keysOf(t, "c0", elsewhere)...); len(k) != 0 {
		t.Fatalf("refused LockAll left keys %v", k)
	}
}
