//go:build unix

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// nextLeader reads observe's JSON lines until one satisfies cond.
func nextLeader(t *testing.T, p *proc, what string, cond func(leaderJSON) bool) leaderJSON {
	t.Helper()
	deadline := time.After(long)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("observe exited before %s; stderr: %s", what, p.stderr.String())
			}
			var v leaderJSON
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("observe printed %q: %v", l, err)
			}
			if cond(v) {
				return v
			}
		case <-deadline:
			t.Fatalf("observe never showed %s", what)
		}
	}
}

// electFirst starts elect of v1 by identity first, with no command, and
// checks that it says it leads and that obs sees it lead.
func electFirst(t *testing.T, obs *proc, name string) (*proc, leaderJSON) {
	t.Helper()
	first := start(t, "elect", name, "v1", "--identity", "first")
	line := first.waitLine(`leader "v1"`)
	if !strings.HasSuffix(line, "(this process)") || !strings.Contains(line, `identity="first"`) {
		t.Errorf("elect printed %q", line)
	}
	v1 := nextLeader(t, obs, "v1", func(v leaderJSON) bool { return v.Value == "v1" })
	if v1.Identity != "first" || v1.Token <= 0 || v1.Self {
		t.Errorf("observed %+v", v1)
	}
	return first, v1
}

// TestElectAndObserve: observe follows the leaders of an election; elect
// without a command holds leadership until interrupted; elect with a command
// waits its turn, runs it while leading and resigns when it exits.
// checkSecondLeads checks the second candidate's command line (line) and
// what obs observes of its term, after v1's.
func checkSecondLeads(t *testing.T, obs *proc, line string, v1 leaderJSON) {
	t.Helper()
	if f := strings.Fields(line); len(f) != 3 || f[1] != "v2" {
		t.Errorf("the command printed %q", line)
	}
	v2 := nextLeader(t, obs, "v2", func(v leaderJSON) bool { return v.Value == "v2" })
	if at, err := time.Parse(time.RFC3339Nano, v2.At); err != nil || time.Since(at) > time.Minute || time.Since(at) < 0 {
		t.Errorf("observe's line has no time of its own: %+v (%v)", v2, err)
	}
	if v2.Identity != "second" || v2.Token <= v1.Token || !strings.HasSuffix(line, " "+(etcdlock.Token(v2.Token)).String()) {
		t.Errorf("observed %+v after v1 (token %d); the command printed %q", v2, v1.Token, line)
	}
}

func TestElectAndObserve(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	gate := filepath.Join(t.TempDir(), "gate")

	obs := start(t, "observe", name, "-o", "json")
	nextLeader(t, obs, "no leader", func(v leaderJSON) bool { return !v.Leader })

	first, v1 := electFirst(t, obs, name)

	second := startEnv(t, []string{"GATE=" + gate}, append([]string{"elect", name, "v2", "--identity", "second", "--"},
		sh(`echo "leading $ETCDLOCK_VALUE $ETCDLOCK_TOKEN"; while [ ! -e "$GATE" ]; do sleep 0.02; done`)...)...)
	locktest.WaitState(t, cli, name, "second candidate", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })

	first.signal(syscall.SIGINT) // resigns
	if code, _ := first.wait(); code != 0 || !strings.Contains(first.stderr.String(), "resigned leadership") {
		t.Fatalf("elect v1 exited %d; stderr: %s; want 0 and that it resigned", code, first.stderr.String())
	}
	checkSecondLeads(t, obs, second.waitLine("leading"), v1)

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _ := second.wait(); code != 0 {
		t.Fatalf("elect v2 exited %d; stderr: %s", code, second.stderr.String())
	}
	nextLeader(t, obs, "no leader after v2", func(v leaderJSON) bool { return !v.Leader })
	obs.signal(syscall.SIGTERM)
	if code, _ := obs.wait(); code != 0 {
		t.Fatalf("observe exited %d; stderr: %s", code, obs.stderr.String())
	}
	if st := locktest.Describe(t, cli, name); st.Holder != nil || len(st.Waiters) != 0 {
		t.Errorf("keys left: %+v", st)
	}
}

// TestElectLost: elect without a command exits 125 when its leadership is
// broken.
func TestElectLost(t *testing.T) {
	name := embedtest.UniqueName(t, "cli")
	p := start(t, "elect", name, "v")
	p.waitLine("(this process)")
	if code, _, stderr := run(t, "break", name, "--force"); code != 0 {
		t.Fatalf("break exited %d: %s", code, stderr)
	}
	code, _ := p.wait()
	if code != exitLost || !strings.Contains(p.stderr.String(), "was lost") {
		t.Fatalf("exit %d, want 125; stderr: %s", code, p.stderr.String())
	}
}

// TestElectKindMismatch: a name used by a lock is not an election.
func TestElectKindMismatch(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	hold(t, cli, name, "locker")
	for _, args := range [][]string{{"observe", name}, {"elect", name, "v"}, {"elect", name, "v", "--", "true"}} {
		code, _, stderr := run(t, args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want 1", args, code)
		}
		oneErrorLine(t, stderr, "kind mismatch")
	}
}
