//go:build linux

package main

// In cmd/etcdlock, not internal/serve: its client vanishes in a network namespace from the serve process.

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// sessionVanishChild is a client (python3, in the namespace) that opens a
// session with ttl 5 s, locks HELD on it, prints "HELD", then asks the
// session to lock WAIT with wait 1h (a request that waits: the name is
// held), prints "SENT" and sleeps. It never calls keepalive: the waiting
// request counts as one (sessions.go request/expire).
const sessionVanishChild = `
import http.client, json, os, sys, threading, time
addr = os.environ["ADDR"]
def post(path, body):
    c = http.client.HTTPConnection(addr, timeout=3600)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, json.loads(r.read() or b"null")
st, out = post("/v1/sessions", {"ttl": "5s"})
if st != 200: sys.exit("session: %d %s" % (st, out))
sid = out["session"]
st, out = post("/v1/sessions/%s/lock" % sid, {"name": os.environ["HELD"]})
if st != 200: sys.exit("lock: %d %s" % (st, out))
print("HELD", flush=True)
threading.Thread(target=post, args=("/v1/sessions/%s/lock" % sid, {"name": os.environ["WAIT"], "wait": "1h"}), daemon=True).start()
time.sleep(0.5)
print("SENT", flush=True)
time.sleep(3600)
`

// TestAttackServeVanishedSessionWaiter: a /v1/sessions client (ttl 5 s)
// holds one name and has a lock request waiting for another, then its host
// vanishes. The session should end within about its ttl (no keepalive
// comes), releasing the held name and leaving the queue. But a lock
// request in flight keeps the session from expiring (busy), and a session
// lock request's connection is not bounded by the ttl (no boundConn): it
// lives until Go's default TCP keepalive gives up (15 s + 9 x 15 s), so
// the held name stays held for minutes.
func TestAttackServeVanishedSessionWaiter(t *testing.T) {
	t.Parallel() // its own namespace, server and names; mostly waits
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3")
	}
	ns := newNetns(t)
	srv := startServer(t, nil, "--listen", ns.hostIP+":0")
	cli := cluster.TestClient(t)
	held, awaited := embedtest.UniqueName(t, "cli")+"/held", embedtest.UniqueName(t, "cli")+"/awaited"
	_, first := hold(t, cli, awaited, "go-holder")
	child := exec.Command("ip", "netns", "exec", ns.name, "python3", "-c", sessionVanishChild)
	child.Env = append(os.Environ(), "ADDR="+srv.addr, "HELD="+held, "WAIT="+awaited)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := bufio.NewReader(out)
	for _, want := range []string{"HELD", "SENT"} {
		if line, err := lines.ReadString('\n'); err != nil || strings.TrimSpace(line) != want {
			t.Fatalf("child: %q %v; want %s", line, err, want)
		}
	}
	locktest.WaitState(t, cli, awaited, "the client waiting", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	granted := make(chan string, 1)
	s := locktest.OpenSession(t, cli, etcdlock.WithIdentity("go-waiter"))
	go func() {
		if _, err := etcdlock.NewMutex(s, held).Lock(embedtest.Context(t, 4*time.Minute)); err != nil {
			t.Errorf("%s: %v", held, err)
		}
		granted <- held
	}()
	locktest.WaitState(t, cli, held, "a Go waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	ns.vanish(t)
	gone := time.Now()
	select {
	case <-granted:
		t.Logf("the held name reached its Go waiter %v after the client vanished", time.Since(gone).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		st := locktest.Describe(t, cli, held)
		select {
		case <-granted:
			t.Fatalf("the held name of a vanished session client (ttl 5 s) reached its Go waiter only %v after it vanished", time.Since(gone).Round(time.Second))
		case <-time.After(3 * time.Minute):
			t.Fatalf("the held name of a vanished session client (ttl 5 s) still held 3.5 min after it vanished: %+v", st)
		}
	}
	_ = first.Unlock(embedtest.Context(t, long))
}
