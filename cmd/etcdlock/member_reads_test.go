//go:build unix

package main

import (
	"strings"
	"testing"
)

// TestReadsAtAMember: given a member cluster's endpoints (not the root's),
// status refuses (a name held on another cluster would read as free), and
// ls warns that it sees only that cluster's names.
func TestReadsAtAMember(t *testing.T) {
	d := startDeployment(t)
	name := d.nameOn(t, "a")
	p := d.start(t, "run", name)
	p.waitLine("holding")
	code, out, stderr := runIn(t, append(d.at(1), "status", name)...)
	if code == 0 || strings.Contains(out, "is free") || !strings.Contains(stderr, "not its root") {
		t.Fatalf("status at a member: exit %d, %q, %q", code, out, stderr)
	}
	code, _, stderr = runIn(t, append(d.at(1), "ls")...)
	if code != 0 || !strings.Contains(stderr, "sees only the names it holds") {
		t.Fatalf("ls at a member: exit %d, %q", code, stderr)
	}
	p.signal(2)
	p.wait()
}

// TestClustersInitRefusesATwiceGivenID: clusters init x=P x=Q is a usage
// error, with nothing written (it would silently keep one of them).
func TestClustersInitRefusesATwiceGivenID(t *testing.T) {
	code, _, stderr := runIn(t, "--endpoints", "127.0.0.1:1", "clusters", "init", "x=127.0.0.1:1", "x=127.0.0.1:2")
	if code != exitUsage || !strings.Contains(stderr, "given twice") {
		t.Fatalf("clusters init with a twice-given id: exit %d, %q", code, stderr)
	}
}
