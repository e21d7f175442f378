package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestRunOnce: a run id runs once; the same id or an earlier one is
// already done; a later one runs; a failed run records nothing.
func TestRunOnce(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 60*time.Second)
	m := etcdlock.NewMutex(locktest.OpenSession(t, cli), embedtest.UniqueName(t, "test"))
	var calls []string
	run := func(id string, fail error) error {
		return m.RunOnce(ctx, id, func(ctx context.Context, l *etcdlock.Lock) error {
			if ctx.Err() != nil || l.Token() == 0 {
				t.Errorf("run %s: a grant's context %v, token %d", id, ctx.Err(), l.Token())
			}
			calls = append(calls, id)
			return fail
		})
	}
	boom := errors.New("job failed")
	for _, step := range []struct {
		id   string
		fail error
		want error
	}{
		{"2026-12-01", boom, boom}, // fails: nothing recorded
		{"2026-12-01", nil, nil},   // runs again, and completes
		{"2026-12-01", nil, etcdlock.ErrAlreadyCompleted},
		{"2026-11-30", nil, etcdlock.ErrAlreadyCompleted}, // sorts before the record
		{"2026-12-02", nil, nil},
	} {
		if err := run(step.id, step.fail); !errors.Is(err, step.want) || (step.want == nil && err != nil) {
			t.Fatalf("RunOnce(%s): %v, want %v", step.id, err, step.want)
		}
	}
	if want := []string{"2026-12-01", "2026-12-01", "2026-12-02"}; len(calls) != len(want) || calls[1] != want[1] || calls[2] != want[2] {
		t.Fatalf("fn ran for %v; want %v", calls, want)
	}
	// The record is no queue key: the name is free, and nothing is listed.
	st, err := etcdlock.Describe(ctx, cli, m.Name())
	if err != nil || st.Holder != nil || len(st.Waiters) != 0 {
		t.Fatalf("Describe after the runs: %+v, %v; want a free name", st, err)
	}
	all, err := etcdlock.List(ctx, cli, m.Name())
	if err != nil || len(all) != 0 {
		t.Fatalf("List after the runs: %+v, %v; want nothing", all, err)
	}
}

// TestRunOnceConcurrent: eight callers on their own clients run one id at
// once; exactly one of them runs fn, the others find it done.
func TestRunOnceConcurrent(t *testing.T) {
	ctx := embedtest.Context(t, 60*time.Second)
	name := embedtest.UniqueName(t, "test")
	var ran atomic.Int32
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range errs {
		m := etcdlock.NewMutex(locktest.OpenSession(t, shared.TestClient(t)), name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.RunOnce(ctx, "run-1", func(context.Context, *etcdlock.Lock) error {
				ran.Add(1)
				return nil
			})
		}()
	}
	wg.Wait()
	done := 0
	for i, err := range errs {
		switch {
		case errors.Is(err, etcdlock.ErrAlreadyCompleted):
			done++
		case err != nil:
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	if ran.Load() != 1 || done != len(errs)-1 {
		t.Fatalf("fn ran %d times, %d callers found it done; want 1 and %d", ran.Load(), done, len(errs)-1)
	}
}

// TestRunOnceLostGrantRecordsNothing: a run whose grant is broken before it
// records (a holder that lost the lock) fails with ErrNotHeld and records
// nothing, so the next caller runs the id again.
func TestRunOnceLostGrantRecordsNothing(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 60*time.Second)
	m := etcdlock.NewMutex(locktest.OpenSession(t, cli), embedtest.UniqueName(t, "test"))
	err := m.RunOnce(ctx, "7", func(_ context.Context, l *etcdlock.Lock) error {
		// Not with fn's context: it ends when the break lands, which can be
		// before Break's answer arrives.
		if err := etcdlock.Break(ctx, cli, m.Name(), l.Token()); err != nil {
			t.Fatal(err)
		}
		return nil // as a job that did not notice the loss
	})
	if !errors.Is(err, etcdlock.ErrNotHeld) {
		t.Fatalf("RunOnce whose grant was broken: %v, want ErrNotHeld", err)
	}
	ran := false
	if err := m.RunOnce(ctx, "7", func(context.Context, *etcdlock.Lock) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("the next RunOnce of the id: %v, ran %v; want it to run", err, ran)
	}
}

// TestRunOnceBadInputAndTry: bad input is refused before anything is
// taken; TryRunOnce on a held name fails with ErrLocked without calling fn;
// neither leaves a key.
func TestRunOnceBadInputAndTry(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 30*time.Second)
	name := embedtest.UniqueName(t, "test")
	m := etcdlock.NewMutex(locktest.OpenSession(t, cli), name)
	never := func(context.Context, *etcdlock.Lock) error { t.Error("fn called"); return nil }
	if err := m.RunOnce(ctx, "", never); !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("empty id: %v, want ErrInvalidArgument", err)
	}
	if err := m.TryRunOnce(ctx, "1", nil); !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("nil fn: %v, want ErrInvalidArgument", err)
	}
	if keys := keysUnder(t, cli, name); len(keys) != 0 {
		t.Fatalf("keys %v after refused input", keys)
	}
	held, err := etcdlock.NewMutex(locktest.OpenSession(t, cli), name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.TryRunOnce(ctx, "1", never); !errors.Is(err, etcdlock.ErrLocked) {
		t.Fatalf("TryRunOnce of a held name: %v, want ErrLocked", err)
	}
	if keys := keysUnder(t, cli, name); len(keys) != 1 || keys[0] != held.Key() {
		t.Fatalf("keys %v after a refused TryRunOnce; want the holder's only", keys)
	}
}

// TestCompletionReadAndClear: LastCompletion reads the record RunOnce
// wrote; ClearCompletion deletes exactly that record (ErrChanged for one a
// later run replaced), after which the id runs again; bad input is refused.
func TestCompletionReadAndClear(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 30*time.Second)
	name := embedtest.UniqueName(t, "test")
	m := etcdlock.NewMutex(locktest.OpenSession(t, cli, etcdlock.WithIdentity("job/7")), name)
	runs := 0
	run := func(id string) error {
		return m.RunOnce(ctx, id, func(context.Context, *etcdlock.Lock) error { runs++; return nil })
	}
	if _, ok, err := etcdlock.LastCompletion(ctx, cli, name); ok || err != nil {
		t.Fatalf("a fresh name: ok %v, %v", ok, err)
	}
	if err := run("1"); err != nil {
		t.Fatal(err)
	}
	first, ok, err := etcdlock.LastCompletion(ctx, cli, name)
	if err != nil || !ok || first.ID != "1" || first.Identity != "job/7" || first.Token == 0 || first.At.IsZero() {
		t.Fatalf("LastCompletion: %+v, %v, %v", first, ok, err)
	}
	if err := run("2"); err != nil {
		t.Fatal(err)
	}
	if err := etcdlock.ClearCompletion(ctx, cli, name, first); !errors.Is(err, etcdlock.ErrChanged) {
		t.Fatalf("clearing a replaced record: %v, want ErrChanged", err)
	}
	second, _, _ := etcdlock.LastCompletion(ctx, cli, name)
	if err := etcdlock.ClearCompletion(ctx, cli, name, second); err != nil {
		t.Fatal(err)
	}
	if err := run("2"); err != nil || runs != 3 {
		t.Fatalf("run 2 after the clear: %v, %d runs; want it to run again", err, runs)
	}
	checkCompletionBadInput(t, ctx, cli, name, second)
}

// checkCompletionBadInput: LastCompletion and ClearCompletion refuse a nil
// client, a record etcdlock did not read and an empty name.
func checkCompletionBadInput(t *testing.T, ctx context.Context, cli *clientv3.Client, name string, rec etcdlock.Completion) {
	t.Helper()
	for _, err := range []error{
		etcdlock.ClearCompletion(ctx, nil, name, rec),
		etcdlock.ClearCompletion(ctx, cli, name, etcdlock.Completion{ID: "x"}),
		etcdlock.ClearCompletion(ctx, cli, "", rec),
		func() error { _, _, err := etcdlock.LastCompletion(ctx, nil, name); return err }(),
	} {
		if !errors.Is(err, etcdlock.ErrInvalidArgument) && !errors.Is(err, etcdlock.ErrInvalidName) {
			t.Errorf("bad input: %v", err)
		}
	}
}
