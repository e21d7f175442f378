//go:build linux

package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// treeJob is a command whose tree has, beside the shell, a background
// child, a process that left the session (setsid), a double fork and a
// background child that ignores SIGTERM. It prints "tree PID..." (the
// shell's first), then runs tail.
func treeJob(t *testing.T, tail string) []string {
	pidfile := t.TempDir() + "/pid"
	return sh(`sleep 300 & a=$!
setsid sleep 301 & b=$!
sh -c 'sleep 302 & echo $! > "$0"' "$1"; c=$(cat "$1")
sh -c 'trap "" TERM; exec sleep 303' & d=$!
echo tree $$ $a $b $c $d
`+tail, pidfile)
}

// treePids reads the pids of a treeJob's "tree" line; they are killed at
// the end of the test if still alive.
func treePids(t *testing.T, p *proc) []int {
	t.Helper()
	var pids []int
	for _, f := range strings.Fields(p.waitLine("tree "))[1:] {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // if the test fails
	}
	return pids
}

// requireTreeGone fails unless every pid is gone by deadline.
func requireTreeGone(t *testing.T, pids []int, deadline time.Time) {
	t.Helper()
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d of the command's tree still alive", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestRunTreeDiesWithEtcdlock: on Linux no process of the command's tree,
// however it detached, outlives etcdlock by more than 2 s, even when
// etcdlock is killed with SIGKILL; and the lock passes on only by its TTL.
func TestRunTreeDiesWithEtcdlock(t *testing.T) {
	name := embedtest.UniqueName(t, "cli")
	p := start(t, append([]string{"run", name, "--"}, treeJob(t, "wait")...)...)
	pids := treePids(t, p)
	killed := time.Now()
	p.signal(syscall.SIGKILL)
	p.wait()
	requireTreeGone(t, pids, killed.Add(2*time.Second))
	t.Logf("the tree was gone %v after etcdlock's SIGKILL", time.Since(killed))
}

// TestRunTreeDiesWithItsLock: when the lock is lost (broken), the whole tree
// is dead when etcdlock exits 125.
func TestRunTreeDiesWithItsLock(t *testing.T) {
	name := embedtest.UniqueName(t, "cli")
	p := start(t, append([]string{"run", name, "--grace", "100ms", "--"}, treeJob(t, "wait")...)...)
	pids := treePids(t, p)
	if code, out, stderr := run(t, "break", name, "--force"); code != 0 {
		t.Fatalf("break: exit %d, %s %s", code, out, stderr)
	}
	if code, _ := p.wait(); code != exitLost {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitLost, p.stderr.String())
	}
	requireTreeGone(t, pids, time.Now())
}

// TestRunTreeLeftovers: a command that exits and leaves processes running
// has them terminated before the release, and etcdlock says so.
func TestRunTreeLeftovers(t *testing.T) {
	name := embedtest.UniqueName(t, "cli")
	p := start(t, append([]string{"run", name, "--grace", "200ms", "--"}, treeJob(t, "exit 0")...)...)
	pids := treePids(t, p)
	if code, _ := p.wait(); code != 0 {
		t.Fatalf("exit %d, want 0; stderr: %s", code, p.stderr.String())
	}
	requireTreeGone(t, pids[1:], time.Now())
	if want := "left 4 processes running when it exited"; !strings.Contains(p.stderr.String(), want) {
		t.Errorf("stderr %q, want %q", p.stderr.String(), want)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// The state follows the command name in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// TestRunTreeDiesAtMaxRuntime: --max-runtime ends the whole tree, not only
// the command's process group, before etcdlock exits 124.
func TestRunTreeDiesAtMaxRuntime(t *testing.T) {
	name := embedtest.UniqueName(t, "cli")
	p := start(t, append([]string{"run", name, "--max-runtime", "1s", "--grace", "200ms", "--"}, treeJob(t, "wait")...)...)
	pids := treePids(t, p)
	if code, _ := p.wait(); code != exitTimeLimit {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitTimeLimit, p.stderr.String())
	}
	requireTreeGone(t, pids, time.Now())
}
