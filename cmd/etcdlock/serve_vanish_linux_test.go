//go:build linux

package main

// In cmd/etcdlock, not internal/serve: its client vanishes in a network namespace from the serve process.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// netnsSeq numbers the namespaces of this process.
var netnsSeq atomic.Int64

// netns is a network namespace joined to this one by a veth pair: a host
// the test can make vanish (its link goes down: from then on packets
// either way are dropped, with no FIN and no RST).
type netns struct {
	name           string
	hostIP, nsIP   string
	hostIf, peerIf string
}

// newNetns creates a namespace, removed at cleanup. It needs root and
// iproute2: without them the test is skipped, unless
// ETCDLOCK_REQUIRE_NETNS is set (CI sets it where it can create one).
func newNetns(t *testing.T) *netns {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil || os.Geteuid() != 0 {
		if os.Getenv("ETCDLOCK_REQUIRE_NETNS") != "" {
			t.Fatalf("a network namespace needs root and iproute2 (ip: %v, euid %d)", err, os.Geteuid())
		}
		t.Skip("needs root and iproute2 to put a client in a network namespace")
	}
	// Distinct in this process (tests that use one run side by side), and
	// apart from a killed run's leftovers as far as the pid goes.
	n := (os.Getpid()+int(netnsSeq.Add(1)))%250 + 1
	ns := &netns{name: fmt.Sprintf("etcdlock-test-%d", n), hostIP: fmt.Sprintf("10.213.%d.1", n),
		nsIP: fmt.Sprintf("10.213.%d.2", n), hostIf: fmt.Sprintf("etlh%d", n), peerIf: fmt.Sprintf("etln%d", n)}
	_ = exec.Command("ip", "netns", "del", ns.name).Run() // a leftover of a killed run
	_ = exec.Command("ip", "link", "del", ns.hostIf).Run()
	ipCmd(t, "netns", "add", ns.name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns.name).Run() })
	ipCmd(t, "link", "add", ns.hostIf, "type", "veth", "peer", "name", ns.peerIf)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", ns.hostIf).Run() })
	ipCmd(t, "link", "set", ns.peerIf, "netns", ns.name)
	ipCmd(t, "addr", "add", ns.hostIP+"/30", "dev", ns.hostIf)
	ipCmd(t, "link", "set", ns.hostIf, "up")
	ns.ip(t, "addr", "add", ns.nsIP+"/30", "dev", ns.peerIf)
	ns.ip(t, "link", "set", ns.peerIf, "up")
	ns.ip(t, "link", "set", "lo", "up")
	return ns
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// ip runs ip in the namespace.
func (ns *netns) ip(t *testing.T, args ...string) {
	t.Helper()
	ipCmd(t, append([]string{"netns", "exec", ns.name, "ip"}, args...)...)
}

// vanish takes the namespace's link down: its host is gone, silently.
func (ns *netns) vanish(t *testing.T) { ns.ip(t, "link", "set", ns.peerIf, "down") }

// TestServeVanishedClient: a client on another host holds one name and
// waits for another by stream, both with ttl 5 s, then its host vanishes
// (no FIN, no RST). Both names reach the Go waiters behind it within 30 s:
// the held one as its connection's unacknowledged "alive" lines time out,
// the awaited one as its keepalive probes do (TCP alone would keep both
// connections for about 15 minutes).
func TestServeVanishedClient(t *testing.T) {
	t.Parallel() // its own namespace, server and names; mostly waits
	ns := newNetns(t)
	srv := startServer(t, nil, "--listen", ns.hostIP+":0")
	cli := cluster.TestClient(t)
	held, awaited := embedtest.UniqueName(t, "cli")+"/held", embedtest.UniqueName(t, "cli")+"/awaited"
	_, first := hold(t, cli, awaited, "go-holder")
	child := exec.Command("ip", "netns", "exec", ns.name, os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), vanishChildEnv+"="+srv.addr, "ETCDLOCK_TEST_NAME="+held, "ETCDLOCK_TEST_WAIT_NAME="+awaited)
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
	granted := make(chan string, 2)
	for _, name := range []string{held, awaited} {
		s := locktest.OpenSession(t, cli, etcdlock.WithIdentity("go-waiter"))
		go func() {
			if _, err := etcdlock.NewMutex(s, name).Lock(embedtest.Context(t, 2*time.Minute)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			granted <- name
		}()
	}
	locktest.WaitState(t, cli, held, "a Go waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	locktest.WaitState(t, cli, awaited, "a Go waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 2 })
	ns.vanish(t)
	gone := time.Now()
	if err := first.Unlock(embedtest.Context(t, long)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case name := <-granted:
			t.Logf("%s reached its Go waiter %v after the client vanished", name, time.Since(gone).Round(time.Millisecond))
		case <-time.After(30*time.Second - time.Since(gone)):
			t.Fatalf("a name of the vanished client did not reach its Go waiter within 30 s: %+v / %+v", locktest.Describe(t, cli, held), locktest.Describe(t, cli, awaited))
		}
	}
}
