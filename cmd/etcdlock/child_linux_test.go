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
)

// TestRunParentDeath: on Linux the command dies with etcdlock, even when
// etcdlock is killed with SIGKILL (the parent-death signal).
func TestRunParentDeath(t *testing.T) {
	name := uniqueName(t)
	p := start(t, append([]string{"run", name, "--"}, sh(`echo ready $$; exec sleep 600`)...)...)
	pid, err := strconv.Atoi(strings.Fields(p.waitLine("ready"))[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // if the test fails
	p.signal(syscall.SIGKILL)
	p.wait()
	deadline := time.Now().Add(long)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("command (pid %d) still alive %v after etcdlock was killed", pid, long)
		}
		time.Sleep(20 * time.Millisecond)
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
