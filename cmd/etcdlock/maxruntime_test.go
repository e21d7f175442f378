//go:build unix

package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestRunMaxRuntime: a command that runs past --max-runtime gets SIGTERM
// at the cap and SIGKILL --grace later (it ignores SIGTERM here); then the
// lock is released and etcdlock exits 124. A command that ends before the
// cap is not touched.
func TestRunMaxRuntime(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	start := time.Now()
	code, _, stderr := run(t, "run", name, "--max-runtime", "1s", "--grace", "500ms", "--",
		"/bin/sh", "-c", `trap "" TERM; while :; do sleep 0.1; done`)
	took := time.Since(start)
	if code != exitTimeLimit {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitTimeLimit, stderr)
	}
	for _, want := range []string{"ran past --max-runtime 1s: sending SIGTERM", "sending SIGKILL", "was killed by SIGKILL; exiting 124"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q: %s", want, stderr)
		}
	}
	if took < 1500*time.Millisecond {
		t.Errorf("etcdlock exited %v after it started: before the cap and its grace", took)
	}
	if st := locktest.Describe(t, cli, name); st.Holder != nil || len(st.Waiters) != 0 {
		t.Fatalf("the lock is still held after --max-runtime: %+v", st)
	}
	code, _, stderr = run(t, "run", name, "--max-runtime", "1m", "--", "true")
	if code != 0 || stderr != "" {
		t.Fatalf("a command within the cap: exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
	code, _, stderr = run(t, "run", name, "--max-runtime", "0s", "--", "true")
	if code != exitUsage {
		t.Fatalf("--max-runtime 0s: exit %d, want %d", code, exitUsage)
	}
	oneErrorLine(t, stderr, "--max-runtime must be positive")
}

// TestRunEscalatesIgnoredSIGTERM: a command that ignores the SIGTERM that
// run forwards gets SIGKILL --grace later.
func TestRunEscalatesIgnoredSIGTERM(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	p := start(t, "run", name, "--grace", "500ms", "--", "/bin/sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.1; done`)
	p.waitLine("ready")
	p.signal(syscall.SIGTERM)
	code, _ := p.wait()
	stderr := p.stderr.String()
	if code != 128+int(syscall.SIGKILL) || !strings.Contains(stderr, "SIGKILL in 500ms") || !strings.Contains(stderr, "sending SIGKILL") {
		t.Fatalf("exit %d, want %d (killed); stderr: %s", code, 128+int(syscall.SIGKILL), stderr)
	}
	if st := locktest.Describe(t, cli, name); st.Holder != nil {
		t.Fatalf("the lock is still held: %+v", st.Holder)
	}
}
