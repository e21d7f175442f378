//go:build unix

package main

// In cmd/etcdlock, not internal/serve: it runs serve on a sharded deployment's root (--endpoints).

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestAttackServeSessionCut: a serve session (ttl 5s) locks a name on b;
// b's link is black-holed for 12 s (the session's lease on b runs out; the
// root stays up) and another holder takes the name. The keepalive must
// fail once the lock is gone: a client counts its locks held until its
// last answered keepalive + ttl.
func TestAttackServeSessionCut(t *testing.T) {
	t.Parallel() // touches only its own names, links and clusters; mostly waits
	d, link := linkedDeployment(t)
	srv := startServer(t, d.cs[0].Endpoints())
	name := d.nameOn(t, "b")
	code, opened := srv.Do(t, "POST", "/v1/sessions", map[string]any{"ttl": "5s"})
	if code != http.StatusOK {
		t.Fatalf("open: %d %v", code, opened)
	}
	sid := opened["session"]
	code, locked := srv.Do(t, "POST", fmt.Sprintf("/v1/sessions/%s/lock", sid), map[string]any{"name": name})
	if code != http.StatusOK {
		t.Fatalf("lock: %d %v", code, locked)
	}
	link.Hold()
	var kas []string
	for i := 0; i < 12; i++ {
		time.Sleep(time.Second)
		code, ka := srv.Do(t, "POST", fmt.Sprintf("/v1/sessions/%s/keepalive", sid), nil)
		kas = append(kas, fmt.Sprintf("%d%v", code, ka["code"]))
	}
	link.Restore()
	t.Logf("keepalives during the cut: %v", kas)
	// Another client takes the name at the root.
	c2, out2, err2 := d.sh(t, "run", name, "--wait", "20s", "--", "true")
	t.Logf("run at the root after the cut: %d %q %q", c2, out2, err2)
	code, ka := srv.Do(t, "POST", fmt.Sprintf("/v1/sessions/%s/keepalive", sid), nil)
	t.Logf("keepalive after another took the name: %d %v", code, ka)
	if c2 == 0 && code == http.StatusOK {
		t.Errorf("keepalive still 200 after the session's lock on b was lost and another run held %s", name)
	}
}
