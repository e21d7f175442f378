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
	clientv3 "go.etcd.io/etcd/client/v3"
)

// queueUp makes the given identities wait for name, in order, with library
// sessions; each holds the lock once granted, until the test ends.
func queueUp(t *testing.T, cli *clientv3.Client, name string, ids ...string) {
	t.Helper()
	for i, id := range ids {
		s := locktest.OpenSession(t, cli, etcdlock.WithIdentity(id))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if l, err := etcdlock.NewMutex(s, name).Lock(ctx); err == nil {
				<-ctx.Done() // hold it until the test ends
				_ = l.Unlock(context.Background())
			}
		}()
		t.Cleanup(func() { cancel(); <-done })
		n := i + 1
		locktest.WaitState(t, cli, name, id+" waiting", func(st *etcdlock.LockState) bool { return len(st.Waiters) == n })
	}
}

// sameEntry checks that status's JSON entry g says what Describe's w does,
// with a lease_ttl_left of 1..ttl seconds.
// sameEnqueued reports whether g's enqueue time is w's, and its time in the
// queue up to a minute short of the time since then.
func sameEnqueued(g entryJSON, w etcdlock.Entry) bool {
	at, err := time.Parse(time.RFC3339Nano, g.Enqueued)
	if err != nil || !at.Equal(w.Enqueued) || g.InQueue == nil {
		return false
	}
	since := time.Since(w.Enqueued).Seconds()
	return *g.InQueue >= since-60 && *g.InQueue <= since
}

func sameEntry(t *testing.T, what string, g entryJSON, w etcdlock.Entry, ttl int64) {
	t.Helper()
	type fields struct {
		key, lease, identity, kind, mode, value string
		token                                   int64
		size                                    int
	}
	if (fields{g.Key, g.Lease, g.Identity, g.Kind, g.Mode, g.Value, g.Token, g.Size}) !=
		(fields{w.Key, leaseHex(w.Lease), w.Identity, w.Kind, w.Mode, w.Value, int64(w.Token), w.Size}) {
		t.Errorf("%s = %+v, Describe says %+v", what, g, w)
	}
	if !sameEnqueued(g, w) {
		t.Errorf("%s: enqueued %q, %v s in the queue; Describe says %v", what, g.Enqueued, g.InQueue, w.Enqueued)
	}
	if g.LeaseTTLLeft == nil || *g.LeaseTTLLeft <= 0 || *g.LeaseTTLLeft > ttl {
		t.Errorf("%s: lease_ttl_left %v, want 1..%d", what, g.LeaseTTLLeft, ttl)
	}
}

func TestStatusJSONMatchesDescribe(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	s, _ := hold(t, cli, name, "holder/1")
	queueUp(t, cli, name, "waiter/2", "waiter/3")

	code, out, stderr := run(t, "status", name, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	var got statusJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	want := locktest.Describe(t, cli, name)
	if got.Name != want.Name || got.Revision <= 0 || got.Holder == nil {
		t.Fatalf("status = %+v, want name %q, a revision and a holder", got, want.Name)
	}
	ttl := s.TTL().Milliseconds() / 1000
	sameEntry(t, "holder", *got.Holder, *want.Holder, ttl)
	if len(got.Holders) != len(want.Holders) || len(got.Waiters) != len(want.Waiters) {
		t.Fatalf("%d holders, %d waiters; Describe says %d, %d", len(got.Holders), len(got.Waiters), len(want.Holders), len(want.Waiters))
	}
	for i := range want.Waiters {
		sameEntry(t, "waiter", got.Waiters[i], want.Waiters[i], ttl)
	}
	if ids := []string{got.Waiters[0].Identity, got.Waiters[1].Identity}; ids[0] != "waiter/2" || ids[1] != "waiter/3" {
		t.Errorf("waiters in order %v, want [waiter/2 waiter/3]", ids)
	}
}

func TestStatusTable(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	_, l := hold(t, cli, name, "holder/1")
	queueUp(t, cli, name, "waiter/2")
	code, out, stderr := run(t, "status", name)
	if code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	t.Logf("\n%s", out)
	lines := strings.Split(out, "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "1 holder, 1 waiter") ||
		!strings.HasPrefix(lines[1], "ROLE") || !strings.HasPrefix(lines[2], "holder") ||
		!strings.Contains(lines[2], "holder/1") || !strings.Contains(lines[2], l.Token().String()) ||
		!strings.HasPrefix(lines[3], "waiter") || !strings.Contains(lines[3], "waiter/2") {
		t.Errorf("unexpected table:\n%s", out)
	}

	free := embedtest.UniqueName(t, "cli")
	code, out, stderr = run(t, "status", free)
	if code != 0 || !strings.Contains(out, "is free") {
		t.Errorf("status of a free lock: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

func TestLs(t *testing.T) {
	cli := cluster.TestClient(t)
	prefix := embedtest.UniqueName(t, "cli") + "/"
	hold(t, cli, prefix+"a", "holder-a")
	hold(t, cli, prefix+"b", "holder-b")
	queueUp(t, cli, prefix+"b", "waiter-b1", "waiter-b2")
	hold(t, cli, embedtest.UniqueName(t, "cli"), "elsewhere") // not under the prefix

	code, out, stderr := run(t, "ls", prefix, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	checkLsJSON(t, prefix, out)

	code, out, stderr = run(t, "ls", prefix)
	if code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	checkLsTable(t, prefix, out)
}

// checkLsJSON checks ls -o json's out for TestLs: prefix+"a" held by
// holder-a, prefix+"b" held by holder-b with two waiters, nothing else.
func checkLsJSON(t *testing.T, prefix, out string) {
	t.Helper()
	var got []lsJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(got) != 2 || got[0].Name != prefix+"a" || got[1].Name != prefix+"b" ||
		got[0].WaiterCount != 0 || got[1].WaiterCount != 2 ||
		got[0].Holder.Identity != "holder-a" || got[1].Holder.Identity != "holder-b" ||
		got[0].HolderCount != 1 || got[0].Kind != "mutex" {
		t.Errorf("ls = %s", out)
	}
}

// checkLsTable checks ls's table for TestLs: a header, then the two names.
func checkLsTable(t *testing.T, prefix, out string) {
	t.Helper()
	t.Logf("\n%s", out)
	lines := strings.Split(out, "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") ||
		!strings.HasPrefix(lines[1], prefix+"a ") || !strings.HasSuffix(lines[2], " 2") {
		t.Errorf("unexpected table:\n%s", out)
	}
}
