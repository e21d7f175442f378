package serve

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/servetest"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
)

// TestServeSessionKeepalives: a session's lock holds while keepalives come
// within the TTL, and frees within the TTL once they stop; an unlock with
// another token changes nothing, one with the grant's releases it.
func TestServeSessionKeepalives(t *testing.T) {
	t.Parallel() // its own names; mostly waits
	srv := startServer(t, nil, Config{})
	cli := srv.cli
	name := embedtest.UniqueName(t, "serve")
	code, sess := srv.Do(t, "POST", "/v1/sessions", map[string]any{"ttl": "2s", "identity": "py"})
	if code != http.StatusOK || len(fmt.Sprint(sess["session"])) != 32 {
		t.Fatalf("open session: %d %v", code, sess)
	}
	id := fmt.Sprint(sess["session"])
	code, g := srv.Do(t, "POST", "/v1/sessions/"+id+"/lock", map[string]any{"name": name})
	if code != http.StatusOK {
		t.Fatalf("lock: %d %v", code, g)
	}
	code, e := srv.Do(t, "POST", "/v1/sessions/"+id+"/unlock", map[string]any{"name": name, "token": fmt.Sprint(servetest.TokenOf(t, g) - 1)})
	if code != http.StatusConflict || e["code"] != "not_held" {
		t.Fatalf("unlock with another token: %d %v", code, e)
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if code, ka := srv.Do(t, "POST", "/v1/sessions/"+id+"/keepalive", nil); code != http.StatusOK {
			t.Fatalf("keepalive: %d %v", code, ka)
		}
	}
	if st := locktest.Describe(t, cli, name); st.Holder == nil || int64(st.Holder.Token) != servetest.TokenOf(t, g) {
		t.Fatalf("after 3 s of keepalives (TTL 2 s): %+v", st.Holder)
	}
	stopped := time.Now()
	locktest.WaitState(t, cli, name, "freed", func(st *etcdlock.LockState) bool { return st.Holder == nil })
	if d := time.Since(stopped); d > 2*time.Second+time.Second {
		t.Fatalf("freed %v after the last keepalive; want within the TTL (2 s)", d)
	}
	if code, e := srv.Do(t, "POST", "/v1/sessions/"+id+"/keepalive", nil); code != http.StatusNotFound || e["code"] != "session_expired" {
		t.Fatalf("keepalive of an expired session: %d %v", code, e)
	}
	// Unlock with the right token releases.
	code, sess = srv.Do(t, "POST", "/v1/sessions", map[string]any{})
	id = fmt.Sprint(sess["session"])
	_, g = srv.Do(t, "POST", "/v1/sessions/"+id+"/lock", map[string]any{"name": name})
	if code, e := srv.Do(t, "POST", "/v1/sessions/"+id+"/unlock", map[string]any{"name": name, "token": g["token"]}); code != http.StatusOK {
		t.Fatalf("unlock: %d %v", code, e)
	}
	if st := locktest.Describe(t, cli, name); st.Holder != nil {
		t.Fatalf("held after unlock: %+v", st.Holder)
	}
	srv.Do(t, "DELETE", "/v1/sessions/"+id, nil)
}

// TestServeSessionLockWaitsPastTTL: a session's lock request that waits
// longer than the TTL, with no keepalive meanwhile, keeps the session: it
// is granted once the holder releases, and the session lives on.
func TestServeSessionLockWaitsPastTTL(t *testing.T) {
	srv := startServer(t, nil, Config{})
	name := embedtest.UniqueName(t, "serve")
	held, _ := srv.Hold(t, map[string]any{"name": name})
	_, sess := srv.Do(t, "POST", "/v1/sessions", map[string]any{"ttl": "1s"})
	id := fmt.Sprint(sess["session"])
	got := make(chan map[string]any, 1)
	go func() {
		code, g := srv.Do(t, "POST", "/v1/sessions/"+id+"/lock", map[string]any{"name": name, "wait": "30s"})
		if code != http.StatusOK {
			t.Errorf("lock: %d %v", code, g)
		}
		got <- g
	}()
	locktest.WaitState(t, srv.cli, name, "the session's waiter", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	time.Sleep(2500 * time.Millisecond) // longer than the TTL with no keepalive: what the test is about
	held.Close()
	g := <-got
	if code, out := srv.Do(t, "POST", "/v1/sessions/"+id+"/unlock", map[string]any{"name": name, "token": g["token"]}); code != http.StatusOK {
		t.Fatalf("unlock after the wait: %d %v", code, out)
	}
}

// TestServeVersusV3Lock: etcd's own lock service (v3lock, the one behind
// its JSON gateway's /v3/lock/lock and /v3/lock/unlock) unlocks with an
// unguarded delete of a key name that one lease reuses, so a late or
// retried unlock of an earlier grant deletes a later grant; etcdlock
// serve's unlock is guarded by the token and refuses it.
func TestServeVersusV3Lock(t *testing.T) {
	srv := startServer(t, nil, Config{})
	cli := srv.cli
	ctx := embedtest.Context(t, long)
	name := embedtest.UniqueName(t, "serve")
	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Revoke(embedtest.Context(t, long), lease.ID) })
	lc := v3lockpb.NewLockClient(cli.ActiveConnection())
	first, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("v3lock/" + name), Lease: int64(lease.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: first.Key}); err != nil {
		t.Fatal(err)
	}
	second, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("v3lock/" + name), Lease: int64(lease.ID)})
	if err != nil {
		t.Fatal(err)
	}
	// The first grant's unlock, retried or delivered late.
	if _, err := lc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: first.Key}); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, string(second.Key))
	if err != nil {
		t.Fatal(err)
	}
	if string(first.Key) != string(second.Key) || len(resp.Kvs) != 0 {
		t.Fatalf("v3lock: keys %q and %q, second grant's key after the late unlock: %v", first.Key, second.Key, resp.Kvs)
	}
	t.Logf("v3lock: the late unlock of %q deleted the later grant (same key)", first.Key)

	_, sess := srv.Do(t, "POST", "/v1/sessions", map[string]any{})
	id := sess["session"].(string)
	_, g1 := srv.Do(t, "POST", "/v1/sessions/"+id+"/lock", map[string]any{"name": name})
	if code, out := srv.Do(t, "POST", "/v1/sessions/"+id+"/unlock", map[string]any{"name": name, "token": g1["token"]}); code != http.StatusOK {
		t.Fatal(out)
	}
	_, g2 := srv.Do(t, "POST", "/v1/sessions/"+id+"/lock", map[string]any{"name": name})
	code, out := srv.Do(t, "POST", "/v1/sessions/"+id+"/unlock", map[string]any{"name": name, "token": g1["token"]})
	if code != http.StatusConflict || out["code"] != "not_held" {
		t.Fatalf("serve: a late unlock of token %v: %d %v", g1["token"], code, out)
	}
	if st := locktest.Describe(t, cli, name); st.Holder == nil || fmt.Sprint(st.Holder.Token) != fmt.Sprint(g2["token"]) {
		t.Fatalf("serve: the later grant %v after the late unlock: %+v", g2["token"], st.Holder)
	}
}
