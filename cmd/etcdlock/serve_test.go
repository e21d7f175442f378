//go:build unix

package main

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

// TestServeOneQueue: two HTTP holders and a Go Mutex of one name wait in
// one FIFO queue: the second HTTP holder waits, a Go Lock made after it
// waits behind it, and each close grants the next with a higher token.
// Each HTTP hold shows its own identity.
func TestServeOneQueue(t *testing.T) {
	srv := startServer(t, nil)
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	a, ga := srv.hold(t, map[string]any{"name": name, "identity": "client-a"})
	type opened struct {
		st    *stream
		first map[string]any
	}
	bch := make(chan opened, 1)
	go func() {
		st, _, first := srv.open(t, "/v1/hold", map[string]any{"name": name, "identity": "client-b"})
		bch <- opened{st, first}
	}()
	waitState(t, cli, name, "client-b waiting", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	goLock := make(chan *etcdlock.Lock, 1)
	go func() {
		l, err := etcdlock.NewMutex(locktest.OpenSession(t, cli, etcdlock.WithIdentity("go")), name).Lock(embedtest.Context(t, long))
		if err != nil {
			t.Error(err)
		}
		goLock <- l
	}()
	st := waitState(t, cli, name, "go waiting", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 2 })
	if got := identities(append([]etcdlock.Entry{*st.Holder}, st.Waiters...)); strings.Join(got, ",") != "client-a,client-b,go" {
		t.Fatalf("queue %v; want client-a holding, then client-b, then go", got)
	}
	a.close()
	b := <-bch
	if b.first["event"] != "granted" || tokenOf(t, b.first) <= tokenOf(t, ga) {
		t.Fatalf("second holder: %v after %v", b.first, ga)
	}
	select {
	case <-goLock:
		t.Fatal("the Go Lock was granted before the HTTP holder ahead of it released")
	case <-time.After(100 * time.Millisecond): // (asserting that it still waits)
	}
	b.st.close()
	l := <-goLock
	if l == nil || int64(l.Token()) <= tokenOf(t, b.first) {
		t.Fatalf("Go Lock after the HTTP holders: %v", l)
	}
	_ = l.Unlock(embedtest.Context(t, long))
}

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
		_, code, first := srv.open(t, "/v1/hold", map[string]any{"name": name})
		if code != http.StatusOK || first["event"] != "granted" {
			t.Errorf("waiter: %d %v", code, first)
		}
		got <- time.Now()
	}()
	waitState(t, cluster.TestClient(t), name, "waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
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

// TestServeSessionKeepalives: a session's lock holds while keepalives come
// within the TTL, and frees within the TTL once they stop; an unlock with
// another token changes nothing, one with the grant's releases it.
func TestServeSessionKeepalives(t *testing.T) {
	srv := startServer(t, nil)
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	code, sess := srv.do(t, "POST", "/v1/sessions", map[string]any{"ttl": "2s", "identity": "py"})
	if code != http.StatusOK || len(fmt.Sprint(sess["session"])) != 32 {
		t.Fatalf("open session: %d %v", code, sess)
	}
	id := fmt.Sprint(sess["session"])
	code, g := srv.do(t, "POST", "/v1/sessions/"+id+"/lock", map[string]any{"name": name})
	if code != http.StatusOK {
		t.Fatalf("lock: %d %v", code, g)
	}
	code, e := srv.do(t, "POST", "/v1/sessions/"+id+"/unlock", map[string]any{"name": name, "token": fmt.Sprint(tokenOf(t, g) - 1)})
	if code != http.StatusConflict || e["code"] != "not_held" {
		t.Fatalf("unlock with another token: %d %v", code, e)
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if code, ka := srv.do(t, "POST", "/v1/sessions/"+id+"/keepalive", nil); code != http.StatusOK {
			t.Fatalf("keepalive: %d %v", code, ka)
		}
	}
	if st := describe(t, cli, name); st.Holder == nil || int64(st.Holder.Token) != tokenOf(t, g) {
		t.Fatalf("after 3 s of keepalives (TTL 2 s): %+v", st.Holder)
	}
	stopped := time.Now()
	waitState(t, cli, name, "freed", func(st *etcdlock.LockState) bool { return st.Holder == nil })
	if d := time.Since(stopped); d > 2*time.Second+time.Second {
		t.Fatalf("freed %v after the last keepalive; want within the TTL (2 s)", d)
	}
	if code, e := srv.do(t, "POST", "/v1/sessions/"+id+"/keepalive", nil); code != http.StatusNotFound || e["code"] != "session_expired" {
		t.Fatalf("keepalive of an expired session: %d %v", code, e)
	}
	// Unlock with the right token releases.
	code, sess = srv.do(t, "POST", "/v1/sessions", map[string]any{})
	id = fmt.Sprint(sess["session"])
	_, g = srv.do(t, "POST", "/v1/sessions/"+id+"/lock", map[string]any{"name": name})
	if code, e := srv.do(t, "POST", "/v1/sessions/"+id+"/unlock", map[string]any{"name": name, "token": g["token"]}); code != http.StatusOK {
		t.Fatalf("unlock: %d %v", code, e)
	}
	if st := describe(t, cli, name); st.Holder != nil {
		t.Fatalf("held after unlock: %+v", st.Holder)
	}
	srv.do(t, "DELETE", "/v1/sessions/"+id, nil)
}

// TestServeSessionLockWaitsPastTTL: a session's lock request that waits
// longer than the TTL, with no keepalive meanwhile, keeps the session: it
// is granted once the holder releases, and the session lives on.
func TestServeSessionLockWaitsPastTTL(t *testing.T) {
	srv := startServer(t, nil)
	name := embedtest.UniqueName(t, "cli")
	held, _ := srv.hold(t, map[string]any{"name": name})
	_, sess := srv.do(t, "POST", "/v1/sessions", map[string]any{"ttl": "1s"})
	id := fmt.Sprint(sess["session"])
	got := make(chan map[string]any, 1)
	go func() {
		code, g := srv.do(t, "POST", "/v1/sessions/"+id+"/lock", map[string]any{"name": name, "wait": "30s"})
		if code != http.StatusOK {
			t.Errorf("lock: %d %v", code, g)
		}
		got <- g
	}()
	waitState(t, cluster.TestClient(t), name, "the session's waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	time.Sleep(2500 * time.Millisecond) // longer than the TTL with no keepalive: what the test is about
	held.close()
	g := <-got
	if code, out := srv.do(t, "POST", "/v1/sessions/"+id+"/unlock", map[string]any{"name": name, "token": g["token"]}); code != http.StatusOK {
		t.Fatalf("unlock after the wait: %d %v", code, out)
	}
}
