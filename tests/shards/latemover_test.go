package shards_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// stalled is a MoveSlot call that stops at one phase until released.
type stalled struct {
	reached chan struct{}
	release chan struct{}
	done    chan error
}

// stallMove starts a MoveSlot of name's slot to "to" on r that stops when
// it reports phase, until the test releases it.
func stallMove(t *testing.T, ctx context.Context, r *shard.Shards, name, to, phase string) *stalled {
	t.Helper()
	st := &stalled{reached: make(chan struct{}), release: make(chan struct{}), done: make(chan error, 1)}
	var once sync.Once
	o := shard.MoveOptions{Owner: "stalled", Progress: func(p shard.MoveProgress) {
		if p.Phase == phase {
			once.Do(func() { close(st.reached) })
			<-st.release
		}
	}}
	go func() { st.done <- r.MoveSlot(ctx, shard.SlotOf(name), to, o) }()
	select {
	case <-st.reached:
	case err := <-st.done:
		t.Fatalf("the move ended before %q: %v", phase, err)
	case <-ctx.Done():
		t.Fatalf("the move never reached %q", phase)
	}
	t.Cleanup(st.wake)
	return st
}

// wake releases the stalled call (once) and returns its result.
func (st *stalled) wake() {
	select {
	case <-st.release:
	default:
		close(st.release)
	}
}

func (st *stalled) result(t *testing.T) error {
	t.Helper()
	st.wake()
	select {
	case err := <-st.done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the woken move never returned")
		return nil
	}
}

// stampState is a slot's stamp on one cluster, read directly.
type stampState struct {
	State string `json:"state"`
	Gen   int64  `json:"gen"`
	Move  int64  `json:"move"`
}

func (d *deployment) stamp(t *testing.T, id, name string) stampState {
	t.Helper()
	resp, err := d.clients[id].Get(embedtest.Context(t, 10*time.Second), fmt.Sprintf("etcdlock-shards/slots/%04d", shard.SlotOf(name)))
	if err != nil {
		t.Fatal(err)
	}
	var st stampState
	if len(resp.Kvs) > 0 {
		if err := json.Unmarshal(resp.Kvs[0].Value, &st); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// lockUnlock takes name once on s and releases it, returning its token.
func lockUnlock(t *testing.T, s *shard.Session, name string) etcdlock.Token {
	t.Helper()
	l := mustLock(t, s.NewMutex(name))
	if err := l.Unlock(embedtest.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	return l.Token()
}

// TestLateMoverWritesNothing: a MoveSlot call stalls after raising the
// target's generation, before it activates; a second call (Resume)
// finishes the move, and a grant is made on the target. When the first
// call wakes, (a) right away: it must not re-stamp the target with its own
// lower generation (tokens would go back); (b) after the slot moved back
// to the source: it must not activate the target again (two clusters
// would grant the slot). It writes nothing: (a) returns nil, the move is
// done; (b) returns ErrMoveAborted.
func TestLateMoverWritesNothing(t *testing.T) {
	t.Parallel() // its own deployment; each subtest moves its own slot
	d := startDeployment(t, 1, 1)
	for _, tc := range []struct {
		name     string
		moveBack bool
	}{{"wakes after the resume", false}, {"wakes after a move back", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := embedtest.Context(t, 2*time.Minute)
			s := session(t, d.newShards(t))
			name := d.nameOn(t, "c0")
			before := lockUnlock(t, s, name)
			late := stallMove(t, ctx, d.newShards(t), name, "c1", "raised")
			d.move(t, name, "c1", shard.MoveOptions{Resume: true})
			onTarget := lockUnlock(t, s, name)
			if tc.moveBack {
				d.move(t, name, "c0", shard.MoveOptions{})
			}
			err := late.result(t)
			switch {
			case tc.moveBack && !errors.Is(err, shard.ErrMoveAborted):
				t.Fatalf("the late call after a move back: %v, want ErrMoveAborted", err)
			case !tc.moveBack && err != nil:
				t.Fatalf("the late call of a finished move: %v", err)
			}
			owner, other := "c1", "c0"
			if tc.moveBack {
				owner, other = "c0", "c1"
			}
			if st := d.stamp(t, other, name); st.State == "active" {
				t.Fatalf("the stamp on %s is active again: %+v", other, st)
			}
			after := lockUnlock(t, s, name)
			if !(before < onTarget && onTarget < after) || len(d.keysOf(t, owner, name)) != 0 {
				t.Fatalf("tokens %d, %d, %d do not grow (owner %s, stamp %+v)", before, onTarget, after, owner, d.stamp(t, owner, name))
			}
		})
	}
}

// TestLateMoverKeepsCompletionRecords: a job ran under RunOnce; a MoveSlot
// call stalls (after its drain; after its activation); a second call
// (Resume) finishes the move, a job runs on the target, the slot moves
// back, and a job runs on the source. When the first call wakes it must
// not copy the source's records away, nor delete them there (after its
// activation it would only drop them): a job would run twice. It returns
// ErrMoveAborted and no job runs again.
func TestLateMoverKeepsCompletionRecords(t *testing.T) {
	t.Parallel() // its own deployment; each subtest moves its own slot
	d := startDeployment(t, 1, 1)
	for _, phase := range []string{"drained", "activated"} {
		t.Run(phase, func(t *testing.T) {
			ctx := embedtest.Context(t, 2*time.Minute)
			name := d.nameOn(t, "c0")
			m := session(t, d.newShards(t)).NewMutex(name)
			runs := map[string]int{}
			job := func(id string) {
				t.Helper()
				err := m.RunOnce(ctx, id, func(context.Context, *etcdlock.Lock) error { runs[id]++; return nil })
				if err != nil && !errors.Is(err, etcdlock.ErrAlreadyCompleted) {
					t.Fatalf("RunOnce %s: %v", id, err)
				}
			}
			job("job-0") // a record exists before the late call scans
			late := stallMove(t, ctx, d.newShards(t), name, "c1", phase)
			d.move(t, name, "c1", shard.MoveOptions{Resume: true})
			job("job-1")
			d.move(t, name, "c0", shard.MoveOptions{})
			job("job-2")
			if err := late.result(t); !errors.Is(err, shard.ErrMoveAborted) {
				t.Fatalf("the late call: %v, want ErrMoveAborted", err)
			}
			job("job-0")
			job("job-2")
			if runs["job-0"] != 1 || runs["job-1"] != 1 || runs["job-2"] != 1 {
				t.Fatalf("runs %v, want each job once", runs)
			}
			if st := d.stamp(t, "c1", name); st.State == "active" {
				t.Fatalf("the stamp on c1 is active again: %+v", st)
			}
			rec := layout.CompletionKey(name)
			if resp, err := d.clients["c0"].Get(ctx, rec, clientv3.WithCountOnly()); err != nil || resp.Count != 1 {
				t.Fatalf("the completion record on the owner: %v, %v", resp, err)
			}
		})
	}
}
