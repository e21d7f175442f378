//go:build unix

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestRunRidesOutOutage: with the default TTL and grace, a command keeps
// running through a 5 s outage of the path to etcd (every byte dropped),
// and run exits with its status once the path is back.
func TestRunRidesOutOutage(t *testing.T) {
	t.Parallel() // touches only its own names, links and clusters; mostly waits
	link, err := cluster.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	name := embedtest.UniqueName(t, "cli")
	done := filepath.Join(t.TempDir(), "done")
	script := `trap 'echo got TERM; exit 9' TERM
echo ready
while [ ! -e "$1" ]; do sleep 0.05; done
echo finished`
	p := startRaw(t, nil, append([]string{"--endpoints", strings.Join(link.Endpoints(), ","), "--dial-timeout", "20s",
		"run", name, "--"}, sh(script, done)...)...)
	p.waitLine("ready")
	link.Cut()
	time.Sleep(5 * time.Second) // the outage itself, not a wait for an event
	link.Restore()
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := p.wait()
	if code != 0 || strings.Contains(out, "got TERM") {
		t.Fatalf("after a 5 s outage: exit %d, stdout %q; want 0 and no SIGTERM; stderr: %s", code, out, p.stderr.String())
	}
}

// TestRunRequeuesAfterOutage: a run waiting behind a holder whose session
// expires while etcd is unreachable (the path cut for longer than the TTL)
// opens a new session once etcd answers, queues again, says for how long
// etcd was unreachable, and runs the command when the holder releases.
func TestRunRequeuesAfterOutage(t *testing.T) {
	t.Parallel() // touches only its own names, links and clusters; mostly waits
	cli := cluster.TestClient(t)
	link, err := cluster.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	name := embedtest.UniqueName(t, "cli")
	_, l := hold(t, cli, name, "holder")
	p := startRaw(t, nil, append([]string{"--endpoints", strings.Join(link.Endpoints(), ","), "--dial-timeout", "20s",
		"--command-timeout", "20s", "run", name, "--ttl", "2", "--wait", "1m", "--"}, sh(`echo ran`)...)...)
	first := locktest.WaitState(t, cli, name, "a waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	link.Cut()
	cut := time.Now()
	locktest.WaitState(t, cli, name, "the waiter's lease to expire", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 0 })
	time.Sleep(4 * time.Second) // a longer outage than the TTL: the fault itself
	link.Restore()
	outage := time.Since(cut)
	locktest.WaitState(t, cli, name, "the waiter to queue again", func(st *etcdlock.LockState) bool {
		return len(st.Waiters) == 1 && st.Waiters[0].Lease != first.Waiters[0].Lease
	})
	if err := l.Unlock(embedtest.Context(t, long)); err != nil {
		t.Fatal(err)
	}
	code, out := p.wait()
	stderr := p.stderr.String()
	if code != 0 || out != "ran" || !strings.Contains(stderr, "etcd was unreachable for about") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0, the command's output and why it queued again", code, out, stderr)
	}
	// The figure is the outage, give or take a renewal (TTL/10) and a probe.
	var said time.Duration
	if m := regexp.MustCompile(`unreachable for about ([0-9.]+m?s)`).FindStringSubmatch(stderr); m != nil {
		said, _ = time.ParseDuration(m[1])
	}
	if said < outage-time.Second || said > outage+1500*time.Millisecond {
		t.Fatalf("reported an outage of %v; the link was cut for %v", said, outage.Round(100*time.Millisecond))
	}
}
