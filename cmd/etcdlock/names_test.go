//go:build unix

package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestRunNames: run --names waits until every name is granted (here behind
// a holder of one), runs the command with the names, keys and the one token
// they share, and releases them all; with --wait 0 it exits 124 at once
// when one is held, leaving no key.
func TestRunNames(t *testing.T) {
	cli := cluster.TestClient(t)
	base := embedtest.UniqueName(t, "cli")
	a, b := base+"/a", base+"/b"
	_, held := hold(t, cli, b, "holder")
	code, _, stderr := run(t, "run", "--names", a+","+b, "--wait", "0", "--", "true")
	if code != exitWaitTimeout {
		t.Fatalf("--wait 0 with %s held: exit %d, want %d; stderr %s", b, code, exitWaitTimeout, stderr)
	}
	if st := locktest.Describe(t, cli, a); st.Holder != nil {
		t.Fatalf("--wait 0 left a key under %s: %+v", a, st.Holder)
	}
	p := start(t, append([]string{"run", "--names", a + "," + b, "--"},
		sh(`echo "$ETCDLOCK_NAME|$ETCDLOCK_KEY|$ETCDLOCK_TOKEN"`)...)...)
	locktest.WaitState(t, cli, b, "run's waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	if st := locktest.Describe(t, cli, a); st.Holder == nil {
		t.Fatalf("run holds no key of %s while it waits for %s", a, b)
	}
	if err := held.Unlock(embedtest.Context(t, long)); err != nil {
		t.Fatal(err)
	}
	code, out := p.wait()
	if code != 0 {
		t.Fatalf("exit %d; stderr %s", code, p.stderr.String())
	}
	f := strings.Split(strings.TrimSpace(out), "|")
	if len(f) != 3 || f[0] != a+","+b || len(strings.Split(f[1], ",")) != 2 {
		t.Fatalf("output %q", out)
	}
	if tok, err := etcdlock.ParseToken(f[2]); err != nil || tok <= held.Token() {
		t.Fatalf("ETCDLOCK_TOKEN=%q (%v); want above the holder's %d", f[2], err, held.Token())
	}
	for _, name := range []string{a, b} {
		if st := locktest.Describe(t, cli, name); st.Holder != nil {
			t.Fatalf("%s still held after run: %+v", name, st.Holder)
		}
	}
}

// TestStatusShowsLockDelay: a run with --lock-delay shows it in status, in
// its table and its JSON.
func TestStatusShowsLockDelay(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	p := start(t, "run", name, "--lock-delay", "3s")
	p.waitLine("holding")
	code, out, stderr := run(t, "status", name)
	if code != 0 || !strings.Contains(out, "LOCK-DELAY") || !strings.Contains(out, "3s") {
		t.Fatalf("status: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = run(t, "status", name, "-o", "json")
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Holder == nil ||
		st.Holder.LockDelay == nil || *st.Holder.LockDelay != 3 {
		t.Fatalf("status -o json: exit %d, %v\n%s%s", code, err, out, stderr)
	}
	p.signal(syscall.SIGINT)
	if code, _ := p.wait(); code != 0 {
		t.Fatalf("exit %d after SIGINT; stderr %s", code, p.stderr.String())
	}
	if st := locktest.Describe(t, cli, name); st.Holder != nil {
		t.Fatalf("still held: %+v", st.Holder)
	}
}
