package shards_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/shard"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// stopInDrain starts a move of name's slot to id and stops it (its ctx
// ends) while it drains keys keys: the move stays recorded and the source
// frozen, as after a mover that crashed. Each of also (and the operator's
// Shards) sees the record before it returns.
func (d *deployment) stopInDrain(t *testing.T, name, id string, keys int, also ...*shard.Shards) {
	t.Helper()
	phases := make(chan shard.MoveProgress, 100)
	mctx, stop := context.WithCancel(embedtest.Context(t, time.Minute))
	stopped := make(chan error, 1)
	go func() {
		stopped <- d.admin.MoveSlot(mctx, shard.SlotOf(name), id, shard.MoveOptions{
			Progress: func(p shard.MoveProgress) { phases <- p }})
	}()
	awaitPhase(t, phases, "draining", keys)
	stop()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped move: %v", err)
	}
	for _, r := range append(also, d.admin) {
		waitFor(t, 10*time.Second, "the move record to reach every client", func() bool {
			_, ok := r.Moving(shard.SlotOf(name))
			return ok
		})
	}
}

// checkSlot checks what Describe and Where of r say of name: cluster id,
// status, and the move (from, to) when the status is SlotMoving.
func checkSlot(t *testing.T, r *shard.Shards, name, id, status, from, to string) *shard.State {
	t.Helper()
	ctx := embedtest.Context(t, 10*time.Second)
	st, err := r.Describe(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := r.Where(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string]struct {
		cluster, status string
		move            *shard.MoveInfo
	}{"Describe": {st.Cluster, st.SlotStatus, st.Move}, "Where": {p.Cluster, p.Status, p.Move}} {
		moveOK := got.move == nil
		if status == shard.SlotMoving {
			moveOK = got.move != nil && got.move.Slot == shard.SlotOf(name) && got.move.From == from && got.move.To == to
		}
		if got.cluster != id || got.status != status || !moveOK {
			t.Fatalf("%s: cluster %s, status %q, move %+v; want %s, %q, from %q to %q",
				what, got.cluster, got.status, got.move, id, status, from, to)
		}
	}
	return st
}

// TestReadsDuringMove: while a move of a name's slot is recorded (stopped
// in its drain), Describe and Where say the slot is moving and Describe
// still shows the source's holder; Leader returns the source's leader while
// it leads, and ErrSlotMoving, not ErrNoLeader, once it resigned. After the
// move they say the slot is active on the target, and Leader ErrNoLeader.
func TestReadsDuringMove(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	r := d.newShards(t)
	name := d.nameOn(t, "c1")
	e := session(t, r).NewElection(name)
	l, err := e.Campaign(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	checkSlot(t, r, name, "c1", shard.SlotActive, "", "")
	d.stopInDrain(t, name, "c0", 1, r)

	if st := checkSlot(t, r, name, "c1", shard.SlotMoving, "c1", "c0"); st.Holder == nil || st.Holder.Token != l.Token() {
		t.Fatalf("Describe during the drain: holder %+v, want the leader's key (token %d)", st.Holder, l.Token())
	}
	if info, err := e.Leader(ctx); err != nil || info.Token != l.Token() {
		t.Fatalf("Leader during the drain: %+v, %v; want the source's leader", info, err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if st := checkSlot(t, r, name, "c1", shard.SlotMoving, "c1", "c0"); st.Holder != nil {
		t.Fatalf("Describe after the resign: holder %+v", st.Holder)
	}
	_, err = e.Leader(ctx)
	if !errors.Is(err, etcdlock.ErrSlotMoving) || errors.Is(err, etcdlock.ErrNoLeader) {
		t.Fatalf("Leader of a drained source while the slot moves: %v, want ErrSlotMoving", err)
	}
	t.Log(err)

	d.move(t, name, "c0", shard.MoveOptions{Resume: true}, r)
	checkSlot(t, r, name, "c0", shard.SlotActive, "", "")
	if _, err := e.Leader(ctx); !errors.Is(err, etcdlock.ErrNoLeader) {
		t.Fatalf("Leader after the move: %v, want ErrNoLeader", err)
	}
}

// TestReadsFrozenSlot: a slot whose stamp on the cluster the map names is
// not active, with no move recorded (as a client finds it whose map is
// behind a move's switch, or an operator a stranded slot), is reported
// frozen by Describe and Where, and Leader says ErrSlotMoving, not
// ErrNoLeader.
func TestReadsFrozenSlot(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	r := d.newShards(t)
	name := d.nameOn(t, "c1")
	e := session(t, r).NewElection(name)
	if _, err := e.Leader(ctx); !errors.Is(err, etcdlock.ErrNoLeader) {
		t.Fatalf("Leader of a free name: %v, want ErrNoLeader", err)
	}
	key := fmt.Sprintf("etcdlock-shards/slots/%04d", shard.SlotOf(name))
	resp, err := d.clients["c1"].Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the stamp: %v, %v", resp, err)
	}
	var stamp map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &stamp); err != nil {
		t.Fatal(err)
	}
	stamp["state"] = "frozen"
	frozen, _ := json.Marshal(stamp)
	if _, err := d.clients["c1"].Put(ctx, key, string(frozen)); err != nil {
		t.Fatal(err)
	}
	checkSlot(t, r, name, "c1", shard.SlotFrozen, "", "")
	if _, err := e.Leader(ctx); !errors.Is(err, etcdlock.ErrSlotMoving) {
		t.Fatalf("Leader of a name whose slot is frozen: %v, want ErrSlotMoving", err)
	}
	if _, err := d.clients["c1"].Put(ctx, key, string(resp.Kvs[0].Value)); err != nil {
		t.Fatal(err)
	}
	checkSlot(t, r, name, "c1", shard.SlotActive, "", "")
}

// logSignal returns a logger and a channel closed when the logger first
// logs a message that contains msg (at any level).
func logSignal(msg string) (*zap.Logger, <-chan struct{}) {
	core, _ := observer.New(zapcore.DebugLevel)
	ch := make(chan struct{})
	var once sync.Once
	return zap.New(zapcore.RegisterHooks(core, func(e zapcore.Entry) error {
		if strings.Contains(e.Message, msg) {
			once.Do(func() { close(ch) })
		}
		return nil
	})), ch
}

// TestObserveDuringMove: when the leader resigns on a source whose slot is
// moving, Observe does not report "no leader" (the leader may be about to
// be elected on the target); once the map switches it reports the target's
// state: nobody leads there, then the next leader.
func TestObserveDuringMove(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	r := d.newShards(t)
	name := d.nameOn(t, "c1")
	s := session(t, r)
	first, err := s.NewElection(name).Campaign(ctx, "on c1")
	if err != nil {
		t.Fatal(err)
	}
	log, decided := logSignal("observe: nobody leads here but the slot is moving")
	seen := session(t, r, etcdlock.WithLogger(log)).NewElection(name).Observe(ctx)
	awaitLeader(t, seen, "on c1")
	d.stopInDrain(t, name, "c0", 1, r)
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case info := <-seen:
		t.Fatalf("Observe reported %+v after the leader resigned while the slot moves", info)
	case <-decided:
	case <-time.After(30 * time.Second):
		t.Fatal("Observe never saw the leader resign")
	}
	select {
	case info := <-seen:
		t.Fatalf("Observe reported %+v after the leader resigned while the slot moves", info)
	default:
	}
	d.move(t, name, "c0", shard.MoveOptions{Resume: true}, r)
	select {
	case info := <-seen:
		if info != (etcdlock.LeaderInfo{}) {
			t.Fatalf("Observe after the move: %+v, want no leader (nobody leads on c0)", info)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Observe reported nothing after the move")
	}
	second, err := s.NewElection(name).Campaign(ctx, "on c0")
	if err != nil {
		t.Fatal(err)
	}
	if got := awaitLeader(t, seen, "on c0"); got.Token != second.Token() || got.Token <= first.Token() {
		t.Fatalf("observed token %d, the leader's %d, the first's %d", got.Token, second.Token(), first.Token())
	}
}
