//go:build unix

package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// turnsScript is TestRunTakesTurns's job: it appends "$1 start $TOKEN" to
// $LOG, waits for its gate file $GATE.$1, and appends "$1 end".
const turnsScript = `echo "$1 start $ETCDLOCK_TOKEN" >> "$LOG"
while [ ! -e "$GATE.$1" ]; do sleep 0.02; done
echo "$1 end" >> "$LOG"`

// readLog returns the file log says, "" while there is none.
func readLog(t *testing.T, log string) string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// TestRunTakesTurns: three runs of a script that appends to a file take
// turns, never interleave, and are granted in the order they started.
func TestRunTakesTurns(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	dir := t.TempDir()
	log, gate := filepath.Join(dir, "log"), filepath.Join(dir, "gate")
	procs := startTurns(t, cli, name, log, gate)
	st := locktest.Describe(t, cli, name)
	if got := identities(st.Waiters); strings.Join(got, ",") != "B,C" {
		t.Fatalf("waiters = %v, want [B C]", got)
	}
	if got := readLog(t, log); strings.Contains(got, "B") || strings.Contains(got, "C") {
		t.Fatalf("B or C ran while A held the lock:\n%s", got)
	}
	for _, id := range []string{"C", "B", "A"} { // A's gate last: B and C go on as soon as granted
		if err := os.WriteFile(gate+"."+id, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range procs {
		if code, _ := p.wait(); code != 0 {
			t.Fatalf("run %d exited %d; stderr: %s", i, code, p.stderr.String())
		}
	}
	checkTurns(t, readLog(t, log))
	if st := locktest.Describe(t, cli, name); st.Holder != nil || len(st.Waiters) != 0 {
		t.Fatalf("keys left after all runs: %+v", st)
	}
}

// startTurns starts turnsScript as A, B and C on name, logging to log with
// gate files gate.ID, each once the one before holds (A: has logged its
// start) or waits for name.
func startTurns(t *testing.T, cli *clientv3.Client, name, log, gate string) []*proc {
	t.Helper()
	env := []string{"LOG=" + log, "GATE=" + gate}
	var procs []*proc
	for i, id := range []string{"A", "B", "C"} {
		procs = append(procs, startEnv(t, env, append([]string{"run", name, "--identity", id, "--"}, sh(turnsScript, id)...)...))
		if i == 0 {
			deadline := time.Now().Add(long)
			for !strings.Contains(readLog(t, log), "A start") {
				if time.Now().After(deadline) {
					t.Fatalf("A never started; stderr: %s", procs[0].stderr.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			continue
		}
		// Start the next one only once this one waits, so the start order is known.
		locktest.WaitState(t, cli, name, id+" waiting", func(st *etcdlock.LockState) bool { return len(st.Waiters) == i })
	}
	return procs
}

// checkTurns checks the log of TestRunTakesTurns: A, B and C each started
// and ended in turn, with increasing tokens.
func checkTurns(t *testing.T, log string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(log), "\n")
	re := regexp.MustCompile(`^([ABC]) (start (\d+)|end)$`)
	var order []string
	last := int64(0)
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("bad log line %q in:\n%s", l, log)
		}
		order = append(order, m[1]+" "+strings.Fields(m[2])[0])
		if m[3] != "" {
			tok, _ := strconv.ParseInt(m[3], 10, 64)
			if tok <= last {
				t.Errorf("token %d after %d: tokens must increase", tok, last)
			}
			last = tok
		}
	}
	if got, want := strings.Join(order, ","), "A start,A end,B start,B end,C start,C end"; got != want {
		t.Fatalf("order = %s, want %s", got, want)
	}
}

// TestRunWaitTimeout: --wait gives up with 124 and leaves no key.
func TestRunWaitTimeout(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	_, l := hold(t, cli, name, "holder")

	t.Run("1s", func(t *testing.T) {
		p := start(t, "run", name, "--wait", "1s", "--", "/bin/echo", "ran")
		code, out := p.wait()
		elapsed := time.Since(p.start)
		if code != exitWaitTimeout || out != "" {
			t.Fatalf("exit %d, stdout %q; want 124 and no output; stderr: %s", code, out, p.stderr.String())
		}
		oneErrorLine(t, p.stderr.String(), "timed out after 1s")
		if elapsed < time.Second {
			t.Errorf("gave up after %v, before --wait", elapsed)
		}
	})
	t.Run("0", func(t *testing.T) {
		code, out, stderr := run(t, "run", name, "--wait", "0", "--", "/bin/echo", "ran")
		if code != exitWaitTimeout || out != "" {
			t.Fatalf("exit %d, stdout %q; want 124 and no output; stderr: %s", code, out, stderr)
		}
		oneErrorLine(t, stderr, "held or waited for")
	})
	// Checked at once, not polled: etcdlock removes its key before exiting.
	st := locktest.Describe(t, cli, name)
	if st.Holder == nil || st.Holder.Key != l.Key() || len(st.Waiters) != 0 {
		t.Fatalf("state after the timeouts: holder %+v, waiters %+v; want only the test's holder", st.Holder, st.Waiters)
	}
}

// TestRunInterruptWhileWaiting: a signal while waiting exits 128+N and
// leaves no key behind.
func TestRunInterruptWhileWaiting(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	_, l := hold(t, cli, name, "holder")
	p := start(t, "run", name, "--", "/bin/echo", "ran")
	locktest.WaitState(t, cli, name, "a waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	p.signal(syscall.SIGINT)
	code, out := p.wait()
	if code != 130 || out != "" {
		t.Fatalf("exit %d, stdout %q; want 130 and no output; stderr: %s", code, out, p.stderr.String())
	}
	oneErrorLine(t, p.stderr.String(), "interrupted by SIGINT while waiting")
	st := locktest.Describe(t, cli, name)
	if st.Holder == nil || st.Holder.Key != l.Key() || len(st.Waiters) != 0 {
		t.Fatalf("state after the interrupt: holder %+v, waiters %+v; want only the test's holder", st.Holder, st.Waiters)
	}
}

// TestRunExitCodes: the command's status passes through; 126 and 127 for
// commands that cannot run; the lock is free afterwards.
func TestRunExitCodes(t *testing.T) {
	cli := cluster.TestClient(t)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		argv   []string
		code   int
		stderr string // "" for none
	}{
		{"zero", sh("exit 0"), 0, ""},
		{"one", sh("exit 1"), 1, `command "/bin/sh" exited with status 1`},
		{"seven", sh("exit 7"), 7, `command "/bin/sh" exited with status 7`},
		{"signal", sh("kill -USR1 $$"), 128 + int(syscall.SIGUSR1), `command "/bin/sh" was killed by SIGUSR1`},
		{"not found", []string{"etcdlock-no-such-command"}, exitNotFound, `command "etcdlock-no-such-command" not found`},
		{"no such path", []string{filepath.Join(dir, "missing")}, exitNotFound, "not found"},
		{"not executable", []string{notExec}, exitNotRunnable, "cannot be run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := embedtest.UniqueName(t, "cli")
			code, _, stderr := run(t, append([]string{"run", name, "--"}, tc.argv...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, stderr)
			}
			if tc.stderr == "" && stderr != "" {
				t.Errorf("stderr = %q, want nothing", stderr)
			}
			if tc.stderr != "" {
				oneErrorLine(t, stderr, tc.stderr)
			}
			if st := locktest.Describe(t, cli, name); st.Holder != nil {
				t.Errorf("lock still held after run: %+v", st.Holder)
			}
		})
	}
}

// TestRunEnvironment: ETCDLOCK_* are set after the inherited environment,
// and stdin and stdout are the command's.
func TestRunEnvironment(t *testing.T) {
	name := embedtest.UniqueName(t, "cli")
	p := startEnv(t, []string{"ETCDLOCK_NAME=inherited", "ETCDLOCK_TOKEN=0", "KEPT=yes"},
		append([]string{"run", name, "--"}, sh(`echo "$ETCDLOCK_NAME|$ETCDLOCK_KEY|$ETCDLOCK_TOKEN|$KEPT"`)...)...)
	code, out := p.wait()
	if code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, p.stderr.String())
	}
	f := strings.Split(out, "|")
	if len(f) != 4 {
		t.Fatalf("output %q", out)
	}
	if f[0] != name || !strings.HasPrefix(f[1], "etcdlock/"+name+"%/m/") || f[3] != "yes" {
		t.Errorf("ETCDLOCK_NAME=%q ETCDLOCK_KEY=%q KEPT=%q", f[0], f[1], f[3])
	}
	if tok, err := etcdlock.ParseToken(f[2]); err != nil || tok <= 0 {
		t.Errorf("ETCDLOCK_TOKEN=%q: %v", f[2], err)
	}
}

// TestRunForwardsSignals: SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to
// etcdlock reach the command, whose exit status passes through.
func TestRunForwardsSignals(t *testing.T) {
	cli := cluster.TestClient(t)
	script := `trap 'echo got TERM; exit 41' TERM
trap 'echo got INT; exit 42' INT
trap 'echo got HUP; exit 43' HUP
trap 'echo got QUIT; exit 44' QUIT
echo ready
while :; do sleep 0.05; done`
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
		code int
	}{
		{syscall.SIGTERM, "TERM", 41},
		{syscall.SIGINT, "INT", 42},
		{syscall.SIGHUP, "HUP", 43},
		{syscall.SIGQUIT, "QUIT", 44},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := embedtest.UniqueName(t, "cli")
			p := start(t, append([]string{"run", name, "--"}, sh(script)...)...)
			p.waitLine("ready")
			p.signal(tc.sig)
			p.waitLine("got " + tc.name)
			code, _ := p.wait()
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, p.stderr.String())
			}
			if st := locktest.Describe(t, cli, name); st.Holder != nil {
				t.Errorf("lock still held: %+v", st.Holder)
			}
		})
	}
}

// TestRunLeaseRevoked: revoking the session's lease from outside makes run
// terminate the command (SIGTERM at once, SIGKILL after grace) and exit 125.
func TestRunLeaseRevoked(t *testing.T) {
	cli := cluster.TestClient(t)
	const grace = 2 * time.Second
	for _, tc := range []struct {
		name   string
		script string
		// minimum time from the revoke to etcdlock's exit
		min time.Duration
	}{
		{"stops on SIGTERM", `echo ready $$; exec sleep 600`, 0},
		{"ignores SIGTERM", `trap '' TERM; echo ready $$; exec sleep 600`, grace}, // SIG_IGN survives exec
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := embedtest.UniqueName(t, "cli")
			p := start(t, append([]string{"run", name, "--grace", grace.String(), "--"}, sh(tc.script)...)...)
			pid, err := strconv.Atoi(strings.Fields(p.waitLine("ready"))[1])
			if err != nil {
				t.Fatal(err)
			}
			st := locktest.Describe(t, cli, name)
			if st.Holder == nil {
				t.Fatal("no holder while the command runs")
			}
			revoked := time.Now()
			if _, err := cli.Revoke(embedtest.Context(t, long), st.Holder.Lease); err != nil {
				t.Fatal(err)
			}
			code, _ := p.wait()
			elapsed := time.Since(revoked)
			stderr := p.stderr.String()
			if code != exitLost {
				t.Fatalf("exit %d, want 125; stderr: %s", code, stderr)
			}
			if !strings.Contains(stderr, "lease expired or was revoked") || !strings.Contains(stderr, "exiting 125") {
				t.Errorf("stderr does not explain the loss: %s", stderr)
			}
			if elapsed < tc.min || elapsed > grace+15*time.Second {
				t.Errorf("exited %v after the revoke, want between %v and grace + 15s", elapsed, tc.min)
			}
			// etcdlock waited for its child, so the child is gone (not even a zombie).
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("command (pid %d) still exists after etcdlock exited: %v", pid, err)
			}
		})
	}
}

// TestRunCannotRenew: when the session's keepalives stop getting through,
// the command gets SIGTERM at ValidUntil - grace and SIGKILL at ValidUntil,
// and run exits 125.
func TestRunCannotRenew(t *testing.T) {
	t.Parallel() // touches only its own names, links and clusters; mostly waits
	link, err := cluster.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	name := embedtest.UniqueName(t, "cli")
	const ttl, grace = 4 * time.Second, time.Second
	script := `trap 'echo got TERM' TERM
echo ready
while :; do sleep 0.05; done`
	p := startRaw(t, nil, append([]string{"--endpoints", strings.Join(link.Endpoints(), ","), "--dial-timeout", "20s",
		"run", name, "--ttl", ttl.String(), "--grace", grace.String(), "--"}, sh(script)...)...)
	p.waitLine("ready")
	link.Cut()
	cut := time.Now()
	p.waitLine("got TERM")
	termAt := time.Now()
	code, _ := p.wait()
	stderr := p.stderr.String()
	t.Logf("stderr:\n%s", stderr)
	if code != exitLost {
		t.Fatalf("exit %d, want 125; stderr: %s", code, stderr)
	}
	if !strings.Contains(stderr, "could not renew its lease") || !strings.Contains(stderr, "SIGKILL") {
		t.Errorf("stderr does not explain: %s", stderr)
	}
	// The last renewal was sent about TTL/10 or less before the cut (minus
	// its round trip): SIGTERM comes about TTL - TTL/10 - grace to
	// TTL - grace after it; not at once, and not late.
	if d := termAt.Sub(cut); d < ttl-ttl/renewDivisor-grace-time.Second || d > ttl+10*time.Second {
		t.Errorf("SIGTERM %v after the cut, want about %v to %v", d, ttl-ttl/renewDivisor-grace, ttl-grace)
	}
	if !strings.Contains(stderr, "sending SIGKILL") {
		t.Errorf("no SIGKILL for a command that ignores SIGTERM: %s", stderr)
	}
}

// TestRunBrokenWhileRunning: etcdlock break on a lock held by run makes the
// command stop and run exit 125.
func TestRunBrokenWhileRunning(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	p := start(t, append([]string{"run", name, "--"}, sh(`echo ready; exec sleep 600`)...)...)
	p.waitLine("ready")
	code, out, stderr := run(t, "break", name, "--force")
	if code != 0 || !strings.Contains(out, "broke") {
		t.Fatalf("break: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, _ = p.wait()
	if code != exitLost || !strings.Contains(p.stderr.String(), "deleted by someone else") {
		t.Fatalf("run: exit %d, want 125; stderr: %s", code, p.stderr.String())
	}
	if st := locktest.Describe(t, cli, name); st.Holder != nil {
		t.Errorf("lock held after run exited: %+v", st.Holder)
	}
}

// TestRunWithoutCommandHolds: run NAME with no command prints the grant and
// holds it until SIGINT (released, exit 0); a holder that loses the lock
// exits 125.
func TestRunWithoutCommandHolds(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	p := start(t, "run", name, "--identity", "by-hand")
	line := p.waitLine("holding")
	st := locktest.Describe(t, cli, name)
	if st.Holder == nil || st.Holder.Identity != "by-hand" || !strings.Contains(line, st.Holder.Token.String()) ||
		!strings.Contains(line, st.Holder.Key) {
		t.Fatalf("printed %q; held %+v", line, st.Holder)
	}
	p.signal(syscall.SIGINT)
	if code, _ := p.wait(); code != 0 {
		t.Fatalf("exit %d after SIGINT, want 0; stderr %s", code, p.stderr.String())
	}
	if st := locktest.Describe(t, cli, name); st.Holder != nil {
		t.Fatalf("still held after SIGINT: %+v", st.Holder)
	}

	p = start(t, "run", name)
	p.waitLine("holding")
	st = locktest.Describe(t, cli, name)
	if err := etcdlock.Break(embedtest.Context(t, long), cli, name, st.Holder.Token); err != nil {
		t.Fatal(err)
	}
	if code, _ := p.wait(); code != exitLost || !strings.Contains(p.stderr.String(), "lost lock") {
		t.Fatalf("exit %d after a break, want %d; stderr %s", code, exitLost, p.stderr.String())
	}
}
