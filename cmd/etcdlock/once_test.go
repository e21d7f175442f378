//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// appendScript appends "ran $1 $ETCDLOCK_TOKEN" to $LOG, then exits $2.
const appendScript = `echo "ran $1 $ETCDLOCK_TOKEN" >> "$LOG"; exit $2`

// runOnce runs `run NAME --once id` of appendScript as machine, exiting
// exit, and returns etcdlock's exit code and stderr.
func runOnce(t *testing.T, env []string, name, id, machine, exit string) (int, string) {
	t.Helper()
	p := startEnv(t, env, append([]string{"run", name, "--once", id, "--wait", "30s", "--identity", machine, "--"},
		sh(appendScript, machine, exit)...)...)
	code, _ := p.wait()
	return code, p.stderr.String()
}

// TestRunOnceAcrossMachines: eight machines (processes) run one id at once;
// exactly one runs the command, the others exit 0 saying it is done. A
// later run of the id runs nothing; a new id runs once; a command that
// fails records nothing, so its id runs again.
func TestRunOnceAcrossMachines(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	log := filepath.Join(t.TempDir(), "log")
	env := []string{"LOG=" + log}
	var procs []*proc
	for i := range 8 {
		procs = append(procs, startEnv(t, env, append([]string{"run", name, "--once", "2026-12-01", "--wait", "30s", "--"},
			sh(appendScript, string(rune('a'+i)), "0")...)...))
	}
	done := 0
	for i, p := range procs {
		if code, _ := p.wait(); code != 0 {
			t.Fatalf("machine %d exited %d; stderr: %s", i, code, p.stderr.String())
		}
		if strings.Contains(p.stderr.String(), "already done") {
			oneErrorLine(t, p.stderr.String(), `run "2026-12-01" of "`+name+`" (the last completed run is "2026-12-01", recorded `)
			oneErrorLine(t, p.stderr.String(), `: not running the command`)
			done++
		}
	}
	if ran := strings.Count(readLog(t, log), "ran "); ran != 1 || done != 7 {
		t.Fatalf("%d of 8 machines ran the command, %d said it was done; want 1 and 7; log:\n%s", ran, done, readLog(t, log))
	}
	for _, step := range []struct {
		id, exit string
		code     int
		ran      bool
	}{
		{"2026-12-01", "0", 0, false}, // done already
		{"2026-11-30", "0", 0, false}, // sorts before the record
		{"2026-12-02", "3", 3, true},  // fails: recorded nothing
		{"2026-12-02", "0", 0, true},  // so it runs again
		{"2026-12-02", "0", 0, false},
	} {
		before := strings.Count(readLog(t, log), "ran ")
		code, stderr := runOnce(t, env, name, step.id, "later", step.exit)
		ran := strings.Count(readLog(t, log), "ran ") > before
		if code != step.code || ran != step.ran {
			t.Fatalf("run --once %s (command exits %s): exit %d, ran %v; want %d, %v; stderr: %s", step.id, step.exit, code, ran, step.code, step.ran, stderr)
		}
	}
	if st := locktest.Describe(t, cli, name); st.Holder != nil || len(st.Waiters) != 0 {
		t.Fatalf("keys left after the runs: %+v", st)
	}
}

// TestRunOnceBadFlags: --once needs a run id and an exclusive lock.
func TestRunOnceBadFlags(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--once", ""}, "--once must not be empty"},
		{[]string{"--once", "x", "--semaphore", "2"}, "--once needs an exclusive lock"},
		{[]string{"--once", "x", "--read"}, "--once needs an exclusive lock"},
	} {
		code, _, stderr := run(t, append(append([]string{"run", name}, tc.args...), "--", "true")...)
		if code != 1 {
			t.Errorf("run %v: exit %d, want 1", tc.args, code)
		}
		oneErrorLine(t, stderr, tc.want)
	}
	if st := locktest.Describe(t, cli, name); st.Holder != nil || len(st.Waiters) != 0 {
		t.Fatalf("keys left after refused flags: %+v", st)
	}
}
