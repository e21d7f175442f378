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

	"github.com/etcdlock/etcdlock/embedtest"
)

// observeChild watches OBS's leader by SSE and prints OBS once the first
// event is in.
const observeChild = `
import http.client, os, sys, time
c = http.client.HTTPConnection(os.environ["ADDR"])
c.request("GET", "/v1/observe?name=" + os.environ["OBS"])
r = c.getresponse()
while True:
    line = r.readline()
    if not line: sys.exit("observe ended")
    if line.startswith(b"data:"): break
print("OBS", flush=True)
time.sleep(3600)
`

// TestAttackServeVanishedObserver: an SSE observer's connection is not
// bounded (no boundConn): when its host vanishes, its stream slot and its
// use of the shared session (a lease in etcd, kept alive by the server)
// stay until Go's default TCP keepalive gives up (about 2.5 min), then
// SharedIdle (30 s). Want the lease gone within the default ttl (10 s) +
// SharedIdle + slack.
func TestAttackServeVanishedObserver(t *testing.T) {
	t.Parallel() // its own namespace, server and names; mostly waits
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3")
	}
	ns := newNetns(t)
	srv := startServer(t, nil, "--listen", ns.hostIP+":0")
	cli := cluster.TestClient(t)
	child := exec.Command("ip", "netns", "exec", ns.name, "python3", "-c", observeChild)
	child.Env = append(os.Environ(), "ADDR="+srv.addr, "OBS="+embedtest.UniqueName(t, "cli"))
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "OBS" {
		t.Fatalf("child: %q %v", line, err)
	}
	leases := func() int {
		resp, err := cli.Leases(embedtest.Context(t, long))
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Leases)
	}
	before := leases()
	if before == 0 {
		t.Fatal("no lease while observing")
	}
	ns.vanish(t)
	gone := time.Now()
	for leases() >= before {
		if time.Since(gone) > 55*time.Second {
			t.Fatalf("the shared lease of a vanished observer is still kept alive %v after it vanished (%d leases)", time.Since(gone).Round(time.Second), leases())
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("the observer's lease went %v after it vanished", time.Since(gone).Round(time.Second))
}
