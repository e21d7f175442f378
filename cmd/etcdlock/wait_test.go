//go:build unix

package main

import (
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestRunShortWait: a --wait shorter than a round trip (1ns) still gets a free
// lock (as --wait 0 does), and still times out on a held one with 124,
// leaving no key.
func TestRunShortWait(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	for _, wait := range []string{"1ns", "1ms", "0"} {
		if code, _, stderr := run(t, "run", name, "--wait", wait, "--", "true"); code != 0 {
			t.Fatalf("run --wait %s of a free lock: exit %d; stderr: %s", wait, code, stderr)
		}
	}
	_, l := hold(t, cli, name, "holder")
	for _, wait := range []string{"1ms", "300ms"} {
		code, _, stderr := run(t, "run", name, "--wait", wait, "--", "true")
		if code != exitWaitTimeout {
			t.Fatalf("run --wait %s of a held lock: exit %d, want %d; stderr: %s", wait, code, exitWaitTimeout, stderr)
		}
		oneErrorLine(t, stderr, "--wait")
	}
	if st := locktest.Describe(t, cli, name); st.Holder == nil || st.Holder.Key != l.Key() || len(st.Waiters) != 0 {
		t.Fatalf("after the timed-out runs: %+v; want the holder alone", st)
	}
}
