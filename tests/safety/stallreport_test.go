//go:build linux

package safety

import (
	"bufio"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestStallReport: a stall report names the front key's session (whose it
// is, whether it was reported lost, and its lease's TTL left), when a leader
// was last seen, and where each worker is blocked: its STATUS answer, or
// that it is stopped.
// fakeWorkers gives c a worker that answers STATUS (its stdin is read here)
// and one stopped, whose session of lease was lost; it returns the first
// one's stdin, to be closed at the end.
func fakeWorkers(c *cell, lease int64) io.Closer {
	in, out := io.Pipe()
	running := &proc{id: 1, lease: 7, stdin: out, stderr: &lockedBuffer{}}
	_, _ = running.stderr.Write([]byte("12:00:00.000 WARN session lost {\"reason\": \"validity_clock\"}\n"))
	stopped := &proc{id: 2, lease: lease, paused: true, stderr: &lockedBuffer{}}
	c.procs = []*proc{running, stopped}
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			if sc.Text() == "STATUS" {
				c.handle(running, "STATUS 1 [select] etcdlock.(*waiter).consume < etcdlock.(*waiter).await")
			}
		}
	}()
	return out
}

func TestStallReport(t *testing.T) {
	cl := embedtest.Start(t, embedtest.WithMembers(1))
	cli, err := cl.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	c := &cell{t: t, c: cl, cli: cli, dir: "etcdlock/safety/stall%/", lost: map[int64]lostSession{},
		statusCh: make(chan struct{}, 4)}
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	key := c.dir + "w/1-0"
	if _, err := cli.Put(ctx, key, "{}", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	leaderCtx, stopLeaders := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.leaderLane(leaderCtx) }()
	out := fakeWorkers(c, int64(lease.ID))
	c.mu.Lock()
	c.lost[int64(lease.ID)] = lostSession{worker: 2, at: time.Now(), reason: "validity_clock"}
	c.mu.Unlock()
	waitLeaderSeen(t, c)
	rep := c.stallReport(time.Now())
	stopLeaders()
	<-done
	_ = out.Close()
	for _, want := range []string{
		`a leader last seen [0-9.]+m?s ago`,
		`worker 1: .*\n    blocked in: \[select\] etcdlock\.\(\*waiter\)\.consume < etcdlock\.\(\*waiter\)\.await`,
		`WARN session lost`,
		`worker 2: .*\n    blocked in: \(stopped\)`,
		`front key's lease [0-9a-f]+: worker 2's current session, reported lost by worker 2 [0-9.]+m?s ago \(validity_clock\); TimeToLive: [0-9]+ s left of 60 s`,
	} {
		if !regexp.MustCompile(want).MatchString(rep) {
			t.Errorf("the stall report does not match %q:\n%s", want, rep)
		}
	}
	if !strings.Contains(rep, key) {
		t.Errorf("the stall report does not list the queue's key %s:\n%s", key, rep)
	}
}

// waitLeaderSeen waits until the leader lane has seen a leader.
func waitLeaderSeen(t *testing.T, c *cell) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		seen := !c.leaders.lastSeen.IsZero()
		c.mu.Unlock()
		if seen {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader lane saw no leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMainStack: a STATUS answer starts with the main goroutine's wait
// state and keeps only the library's and etcd client's frames.
func TestMainStack(t *testing.T) {
	s := mainStack()
	if !regexp.MustCompile(`^\[[^\]]+\]`).MatchString(s) {
		t.Fatalf("mainStack() = %q; want the wait state first", s)
	}
	if strings.Contains(s, "testing.") || strings.Contains(s, "runtime.") {
		t.Fatalf("mainStack() = %q; want only etcdlock and clientv3 frames", s)
	}
}
