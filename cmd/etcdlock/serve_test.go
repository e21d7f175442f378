//go:build unix

package main

// In cmd/etcdlock, not internal/serve: a client process holds through the serve process's socket.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// holdChildEnv makes the test binary an HTTP client that holds the name
// ETCDLOCK_TEST_NAME by stream through the server's socket, prints "HELD
// <token>" and waits to be killed.
const holdChildEnv = "ETCDLOCK_TEST_HTTP_HOLD"

func holdChild(sock, name string) int {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Post("http://etcdlock/v1/hold", "application/json", strings.NewReader(fmt.Sprintf(`{"name":%q,"ttl":"30s"}`, name)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, `"granted"`) {
		fmt.Fprintln(os.Stderr, resp.Status, line, err)
		return 1
	}
	fmt.Printf("HELD %s", line)
	select {} // until killed
}

// TestServeClientKilled: a client process that holds by stream is
// SIGKILLed; its socket closes and the next waiter is granted at once, not
// after the hold's 30 s TTL.
func TestServeClientKilled(t *testing.T) {
	srv := startServer(t, nil)
	name := embedtest.UniqueName(t, "cli")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdChildEnv+"="+srv.sock, "ETCDLOCK_TEST_NAME="+name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(line, "HELD ") {
		t.Fatalf("child: %q %v", line, err)
	}
	got := make(chan time.Time, 1)
	go func() {
		_, code, first := srv.Open(t, "/v1/hold", map[string]any{"name": name})
		if code != http.StatusOK || first["event"] != "granted" {
			t.Errorf("waiter: %d %v", code, first)
		}
		got <- time.Now()
	}()
	locktest.WaitState(t, cluster.TestClient(t), name, "waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if d := (<-got).Sub(killed); d > 5*time.Second {
		t.Fatalf("granted %v after the holder was killed; want at once (its TTL is 30 s)", d)
	} else {
		t.Logf("granted %v after SIGKILL of the holding client", d.Round(time.Millisecond))
	}
}
