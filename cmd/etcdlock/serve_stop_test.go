//go:build unix

package main

// In cmd/etcdlock, not internal/serve: it sends SIGTERM and SIGKILL to the serve process.

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestServeStops: on SIGTERM the server releases its grants at once (the
// stream says so) and exits 0; SIGKILLed, its grants free within their
// TTL.
func TestServeStops(t *testing.T) {
	cli := cluster.TestClient(t)
	t.Run("SIGTERM", func(t *testing.T) {
		srv := startServer(t, nil)
		name := embedtest.UniqueName(t, "cli")
		st, _ := srv.Hold(t, map[string]any{"name": name, "ttl": "30s"})
		srv.p.signal(syscall.SIGTERM)
		stopped := time.Now()
		if lost := st.Next(t, "lost"); lost == nil {
			t.Fatal("the stream ended without a lost line")
		}
		locktest.WaitState(t, cli, name, "released", func(st *etcdlock.LockState) bool { return st.Holder == nil })
		if d := time.Since(stopped); d > 5*time.Second {
			t.Fatalf("released %v after SIGTERM; want at once (TTL 30 s)", d)
		}
		if code, _ := srv.p.wait(); code != 0 {
			t.Fatalf("exit %d after SIGTERM; stderr %s", code, srv.p.stderr.String())
		}
	})
	t.Run("SIGKILL", func(t *testing.T) {
		srv := startServer(t, nil)
		name := embedtest.UniqueName(t, "cli")
		srv.Hold(t, map[string]any{"name": name, "ttl": "2s"})
		code, sess := srv.Do(t, "POST", "/v1/sessions", map[string]any{"ttl": "2s"})
		if code != http.StatusOK {
			t.Fatal(sess)
		}
		other := embedtest.UniqueName(t, "cli")
		srv.Do(t, "POST", "/v1/sessions/"+sess["session"].(string)+"/lock", map[string]any{"name": other})
		srv.p.signal(syscall.SIGKILL)
		killed := time.Now()
		for _, n := range []string{name, other} {
			locktest.WaitState(t, cli, n, "freed", func(st *etcdlock.LockState) bool { return st.Holder == nil })
		}
		if d := time.Since(killed); d > 2*time.Second+3*time.Second {
			t.Fatalf("freed %v after SIGKILL; want within the TTL (2 s) and a moment", d)
		} else {
			t.Logf("freed %v after SIGKILL (TTL 2 s)", d.Round(time.Millisecond))
		}
	})
}
