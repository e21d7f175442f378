//go:build unix

package main

import (
	"encoding/json"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
)

// TestServeStops: on SIGTERM the server releases its grants at once (the
// stream says so) and exits 0; SIGKILLed, its grants free within their
// TTL.
func TestServeStops(t *testing.T) {
	cli := cluster.TestClient(t)
	t.Run("SIGTERM", func(t *testing.T) {
		srv := startServer(t, nil)
		name := embedtest.UniqueName(t, "cli")
		st, _ := srv.hold(t, map[string]any{"name": name, "ttl": "30s"})
		srv.p.signal(syscall.SIGTERM)
		stopped := time.Now()
		if lost := st.next(t, "lost"); lost == nil {
			t.Fatal("the stream ended without a lost line")
		}
		waitState(t, cli, name, "released", func(st *etcdlock.LockState) bool { return st.Holder == nil })
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
		srv.hold(t, map[string]any{"name": name, "ttl": "2s"})
		code, sess := srv.do(t, "POST", "/v1/sessions", map[string]any{"ttl": "2s"})
		if code != http.StatusOK {
			t.Fatal(sess)
		}
		other := embedtest.UniqueName(t, "cli")
		srv.do(t, "POST", "/v1/sessions/"+sess["session"].(string)+"/lock", map[string]any{"name": other})
		srv.p.signal(syscall.SIGKILL)
		killed := time.Now()
		for _, n := range []string{name, other} {
			waitState(t, cli, n, "freed", func(st *etcdlock.LockState) bool { return st.Holder == nil })
		}
		if d := time.Since(killed); d > 2*time.Second+3*time.Second {
			t.Fatalf("freed %v after SIGKILL; want within the TTL (2 s) and a moment", d)
		} else {
			t.Logf("freed %v after SIGKILL (TTL 2 s)", d.Round(time.Millisecond))
		}
	})
}

// TestServeBadInput: each bad request gets its code and status, and leaves
// nothing in etcd.
func TestServeBadInput(t *testing.T) {
	srv := startServer(t, nil)
	name := embedtest.UniqueName(t, "cli")
	_, sess := srv.do(t, "POST", "/v1/sessions", map[string]any{})
	id := sess["session"].(string)
	big := make([]byte, 70<<10)
	for i := range big {
		big[i] = 'x'
	}
	for _, tc := range []struct {
		what, method, path string
		body               any
		status             int
		code               string
	}{
		{"bad JSON", "POST", "/v1/hold", "not an object", 400, "invalid_argument"},
		{"unknown field", "POST", "/v1/hold", map[string]any{"name": name, "colour": 1}, 400, "invalid_argument"},
		{"empty name", "POST", "/v1/hold", map[string]any{"name": ""}, 400, "invalid_name"},
		{"bad duration", "POST", "/v1/hold", map[string]any{"name": name, "wait": "soon"}, 400, "invalid_argument"},
		{"bad ttl", "POST", "/v1/hold", map[string]any{"name": name, "ttl": "1500ms"}, 400, "invalid_argument"},
		{"unknown kind", "POST", "/v1/hold", map[string]any{"name": name, "kind": "spinlock"}, 400, "invalid_argument"},
		{"semaphore without n", "POST", "/v1/hold", map[string]any{"name": name, "kind": "semaphore"}, 400, "invalid_argument"},
		{"body too large", "POST", "/v1/hold", map[string]any{"name": string(big)}, 400, "invalid_argument"},
		{"no such session", "POST", "/v1/sessions/0123456789abcdef0123456789abcdef/lock", map[string]any{"name": name}, 404, "session_expired"},
		{"wrong token", "POST", "/v1/sessions/" + id + "/unlock", map[string]any{"name": name, "token": "42"}, 409, "not_held"},
		{"bad token", "POST", "/v1/sessions/" + id + "/unlock", map[string]any{"name": name, "token": "x"}, 400, "invalid_argument"},
		{"state without name", "GET", "/v1/state", nil, 400, "invalid_name"},
		{"key twice", "POST", "/v1/hold", json.RawMessage(`{"name":"` + name + `","name":"` + name + `/b"}`), 400, "invalid_argument"},
		{"key in another case", "POST", "/v1/hold", json.RawMessage(`{"name":"` + name + `","NAME":"` + name + `/b"}`), 400, "invalid_argument"},
		{"key only in another case", "POST", "/v1/hold", json.RawMessage(`{"Name":"` + name + `"}`), 400, "invalid_argument"},
		{"no such endpoint", "GET", "/v1/nothing", nil, 404, "not_found"},
		{"wrong method", "GET", "/v1/hold", nil, 405, "method_not_allowed"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			code, out := srv.do(t, tc.method, tc.path, tc.body)
			if code != tc.status || out["code"] != tc.code || out["error"] == "" {
				t.Fatalf("%d %v; want %d %s", code, out, tc.status, tc.code)
			}
		})
	}
	if keys := keysOf(t, name); len(keys) != 0 {
		t.Fatalf("keys left under %s: %v", name, keys)
	}
	// A kind mismatch, and a Try of a held name.
	st, _ := srv.hold(t, map[string]any{"name": name})
	for body, want := range map[string]string{`{"kind":"read"}`: "kind_mismatch", `{"try":true}`: "locked"} {
		req := map[string]any{"name": name}
		if body == `{"kind":"read"}` {
			req["kind"] = "read"
		} else {
			req["try"] = true
		}
		if _, code, first := srv.open(t, "/v1/hold", req); code != http.StatusConflict || first["code"] != want {
			t.Fatalf("%s on a held mutex: %d %v", body, code, first)
		}
	}
	st.close()
}

// keysOf returns the keys of name's holders and waiters.
func keysOf(t *testing.T, name string) []string {
	t.Helper()
	st := describe(t, cluster.TestClient(t), name)
	var keys []string
	for _, e := range append(st.Holders, st.Waiters...) {
		keys = append(keys, e.Key)
	}
	return keys
}

// TestServeHoldsThroughMemberLoss: the etcd leader is killed while HTTP
// clients hold: after the election the holds are still granted and alive.
func TestServeHoldsThroughMemberLoss(t *testing.T) {
	t.Parallel() // touches only its own names, links and clusters; mostly waits
	c := embedtest.Start(t)
	srv := startServer(t, c.Endpoints())
	names := []string{embedtest.UniqueName(t, "cli"), embedtest.UniqueName(t, "cli")}
	var streams []*stream
	for _, n := range names {
		st, _ := srv.hold(t, map[string]any{"name": n, "ttl": "10s"})
		streams = append(streams, st)
	}
	ctx := embedtest.Context(t, long)
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Alive lines keep coming for longer than the TTL, and no lost line.
	for _, st := range streams {
		for time.Since(killed) < 11*time.Second {
			m := st.next(t, "alive")
			if m == nil {
				t.Fatal("a hold's stream ended after the leader was killed")
			}
		}
	}
	cli := c.TestClient(t)
	for _, n := range names {
		st, err := etcdlock.Describe(ctx, cli, n)
		if err != nil || st.Holder == nil {
			t.Fatalf("%s after the leader was killed: %+v %v", n, st, err)
		}
	}
}
