//go:build linux

package supervise

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// treeScript starts, beside itself, a background child, a process that
// left the session (setsid), a double fork and a background child that
// ignores SIGTERM; prints their pids on one line, then runs its tail.
const treeScript = `sleep 300 & a=$!
setsid sleep 301 & b=$!
sh -c 'sleep 302 & echo $! > "$0"' "$TREE_PIDFILE"; c=$(cat "$TREE_PIDFILE")
sh -c 'trap "" TERM; exec sleep 303' & d=$!
echo "$a $b $c $d"
`

// startTree starts treeScript followed by tail under Start and returns the
// child and the tree's pids (not the shell's).
func startTree(t *testing.T, tail string, grace time.Duration) (*Child, []int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", treeScript+tail)
	cmd.Env = append(os.Environ(), "TREE_PIDFILE="+t.TempDir()+"/pid")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(cmd, grace)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.SignalTree(syscall.SIGKILL) })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read the tree's pids: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	var pids []int
	for _, f := range strings.Fields(line) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pids line %q: %v", line, err)
		}
		pids = append(pids, pid)
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // if the test fails
	}
	if len(pids) != 4 {
		t.Fatalf("pids line %q, want 4 pids", line)
	}
	return c, pids
}

// requireGone fails unless every pid has exited (or is a zombie) within d.
func requireGone(t *testing.T, pids []int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, pid := range pids {
		for procAlive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still alive %v later", pid, d)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func procAlive(pid int) bool {
	_, live := procParent(pid)
	return live
}

func TestTreeLeftoversTerminatedAtExit(t *testing.T) {
	c, pids := startTree(t, "exit 0", 200*time.Millisecond)
	r := c.Loop(Config{ValidUntil: func() time.Time { return time.Now().Add(time.Minute) }, Grant: context.Background()})
	if r.Err != nil || !r.Success || r.Leftovers != len(pids) {
		t.Errorf("result %+v, want success with %d leftovers", r, len(pids))
	}
	// The report comes after the tree is gone.
	requireGone(t, pids, 0)
}

func TestTreeKilledOnLoss(t *testing.T) {
	c, pids := startTree(t, "wait", 100*time.Millisecond)
	grant, lose := context.WithCancelCause(context.Background())
	lose(errBroken)
	r := c.Loop(Config{Grace: 100 * time.Millisecond, Grant: grant,
		ValidUntil: func() time.Time { return time.Now().Add(time.Minute) }})
	if !errors.Is(r.LossCause, errBroken) || !r.Terminated {
		t.Errorf("result %+v, want the loss and Terminated", r)
	}
	requireGone(t, pids, 0)
}

func TestTreeSignalTreeKill(t *testing.T) {
	c, pids := startTree(t, "wait", time.Minute)
	if err := c.SignalTree(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ex := <-c.done
	if ex.code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit %+v, want killed by SIGKILL", ex)
	}
	requireGone(t, pids, 0)
}

func TestDescendantsParse(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & echo $!; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	grandchild, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	// Other tests' supervisors may still be exiting: look for these two.
	found := map[int]bool{}
	for _, pid := range descendants() {
		found[pid] = true
	}
	if !found[cmd.Process.Pid] || !found[grandchild] {
		t.Errorf("descendants %v lack the child %d or the grandchild %d", found, cmd.Process.Pid, grandchild)
	}
	if ppid, live := procParent(grandchild); !live || ppid != cmd.Process.Pid {
		t.Errorf("procParent(%d) = %d, %v; want %d, true", grandchild, ppid, live, cmd.Process.Pid)
	}
}
