//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunRidesOutOutage: with the default TTL and grace, a command keeps
// running through a 5 s outage of the path to etcd (every byte dropped),
// and run exits with its status once the path is back.
func TestRunRidesOutOutage(t *testing.T) {
	link, err := cluster.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	name := uniqueName(t)
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
