//go:build unix

package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestBreakOlderThan: break --older-than D leaves a holder that has held
// less than D and breaks one that has held longer.
func TestBreakOlderThan(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	s, l := hold(t, cli, name, "stuck/1")
	queueUp(t, cli, name, "next/2")
	code, out, stderr := run(t, "break", name, "--older-than", "1h")
	if code != exitUsage || out != "" || !strings.Contains(stderr, "less than --older-than 1h0m0s: left alone") {
		t.Fatalf("break --older-than 1h of a young grant: exit %d, stdout %q, stderr %q; want 1 and left alone", code, out, stderr)
	}
	if st := locktest.Describe(t, cli, name); st.Holder == nil || st.Holder.Key != l.Key() {
		t.Fatalf("break --older-than 1h changed the holder: %+v", st.Holder)
	}
	code, out, stderr = run(t, "break", name, "--older-than", "1ns")
	if code != 0 || !strings.Contains(out, l.Key()) {
		t.Fatalf("break --older-than 1ns: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	checkBroken(t, cli, name, s, l)
	code, _, stderr = run(t, "break", name, "--older-than", "0s")
	if code != exitUsage {
		t.Fatalf("break --older-than 0s: exit %d, want 1", code)
	}
	oneErrorLine(t, stderr, "--older-than must be positive")
}

// TestBreakOlderThanCountsHeldTime: --older-than counts the time held, not
// the time in the queue: a holder that waited 6 s and has held for a moment
// is left alone by --older-than 5s, and broken once it has held 6 s. status
// shows both times.
// checkHeldUnder5 checks that status shows name's holder held under 5 s
// and in the queue for 6 s or more.
func checkHeldUnder5(t *testing.T, name string) {
	t.Helper()
	code, out, _ := run(t, "status", name, "-o", "json")
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Holder == nil || st.Holder.Held == nil ||
		st.Holder.InQueue == nil || *st.Holder.Held > 5 || *st.Holder.InQueue < 6 {
		t.Fatalf("status -o json: exit %d, %v: %s; want held < 5 s and in queue >= 6 s", code, err, out)
	}
}

func TestBreakOlderThanCountsHeldTime(t *testing.T) {
	t.Parallel() // touches only its own names, links and clusters; mostly waits
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	_, first := hold(t, cli, name, "first/1")
	s := locktest.OpenSession(t, cli, etcdlock.WithIdentity("second/2"))
	granted := make(chan *etcdlock.Lock, 1)
	go func() {
		l, err := etcdlock.NewMutex(s, name).Lock(embedtest.Context(t, time.Minute))
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	locktest.WaitState(t, cli, name, "the second in the queue", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	time.Sleep(6 * time.Second) // the second waits 6 s
	if err := first.Unlock(embedtest.Context(t, long)); err != nil {
		t.Fatal(err)
	}
	second := <-granted
	if second == nil {
		t.FailNow()
	}
	locktest.WaitState(t, cli, name, "the grant stamp", func(st *etcdlock.LockState) bool { return st.Holder != nil && st.Holder.Stamped })
	code, out, stderr := run(t, "break", name, "--older-than", "5s")
	if code != exitUsage || out != "" || !strings.Contains(stderr, "less than --older-than 5s: left alone") {
		t.Fatalf("break --older-than 5s of a holder that waited 6 s: exit %d, stdout %q, stderr %q; want it left alone", code, out, stderr)
	}
	checkHeldUnder5(t, name)
	time.Sleep(6 * time.Second) // the second holds 6 s
	code, out, stderr = run(t, "break", name, "--older-than", "5s")
	if code != 0 || !strings.Contains(out, second.Key()) {
		t.Fatalf("break --older-than 5s of a holder that held 6 s: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// TestStatusShowsSizeAndAge: status and ls show a semaphore's size and how
// long each key has been in the queue.
func TestStatusShowsSizeAndAge(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	if _, err := etcdlock.NewSemaphore(locktest.OpenSession(t, cli, etcdlock.WithIdentity("sem/1")), name, 3).Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "status", name)
	lines := strings.Split(out, "\n")
	if code != 0 || len(lines) != 3 || !strings.Contains(lines[0], "(semaphore of 3)") || !strings.Contains(lines[1], "IN QUEUE") ||
		strings.Contains(lines[2], " - ") {
		t.Fatalf("status: exit %d, stderr %q, table:\n%s", code, stderr, out)
	}
	code, out, stderr = run(t, "ls", name, "-o", "json")
	var got []lsJSON
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got) != 1 || got[0].Size != 3 ||
		got[0].Holder.Size != 3 || got[0].Holder.InQueue == nil || got[0].Holder.Enqueued == "" {
		t.Fatalf("ls -o json: exit %d, stderr %q, %v: %s", code, stderr, err, out)
	}
}
