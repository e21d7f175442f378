//go:build linux

package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
)

// frozenChild holds HELD by stream with ttl 5 s over TCP and prints HELD.
const frozenChild = `
import http.client, os, sys, time
c = http.client.HTTPConnection(os.environ["ADDR"])
c.request("POST", "/v1/hold", '{"name":"%s","ttl":"5s"}' % os.environ["HELD"], {"Content-Type": "application/json"})
r = c.getresponse()
line = r.readline()
if b"granted" not in line: sys.exit("hold: %d %r" % (r.status, line))
print("HELD", flush=True)
time.sleep(3600)
`

// TestAttackServeFrozenClientHolds: a stream client's process freezes
// (SIGSTOP, a hung reader): its kernel still ACKs, so neither
// TCP_USER_TIMEOUT nor the keepalive probes fire, and the write deadline
// of ttl on each line only starts to bite once the client's receive
// buffer (about 128 KB by default) is full of "alive" lines (about 45 B/s):
// the hold, ttl 5 s, outlives its frozen client by tens of minutes, where
// a Go client's lease would expire within the ttl.
func TestAttackServeFrozenClientHolds(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3")
	}
	srv := startServer(t, nil, "--listen", "127.0.0.1:0")
	cli := newClient(t)
	held := uniqueName(t) + "/held"
	child := exec.Command("python3", "-c", frozenChild)
	child.Env = append(os.Environ(), "ADDR="+srv.addr, "HELD="+held)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "HELD" {
		t.Fatalf("child: %q %v", line, err)
	}
	granted := make(chan struct{})
	s := openSession(t, cli, "go-waiter")
	go func() {
		if _, err := etcdlock.NewMutex(s, held).Lock(ctxFor(t, time.Minute)); err == nil {
			close(granted)
		}
	}()
	waitState(t, cli, held, "a Go waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	select {
	case <-granted:
		t.Logf("released %v after the client froze", time.Since(frozen).Round(time.Millisecond))
	case <-time.After(40 * time.Second):
		t.Fatalf("a frozen stream client (ttl 5 s) still holds %v after it froze: %+v", time.Since(frozen).Round(time.Second), describe(t, cli, held))
	}
}
