//go:build unix

package main

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
)

// TestServeVersusV3Lock: etcd's own lock service (v3lock, the one behind
// its JSON gateway's /v3/lock/lock and /v3/lock/unlock) unlocks with an
// unguarded delete of a key name that one lease reuses, so a late or
// retried unlock of an earlier grant deletes a later grant; etcdlock
// serve's unlock is guarded by the token and refuses it.
func TestServeVersusV3Lock(t *testing.T) {
	cli := cluster.TestClient(t)
	ctx := embedtest.Context(t, long)
	name := embedtest.UniqueName(t, "cli")
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

	srv := startServer(t, nil)
	_, sess := srv.do(t, "POST", "/v1/sessions", map[string]any{})
	id := sess["session"].(string)
	_, g1 := srv.do(t, "POST", "/v1/sessions/"+id+"/lock", map[string]any{"name": name})
	if code, out := srv.do(t, "POST", "/v1/sessions/"+id+"/unlock", map[string]any{"name": name, "token": g1["token"]}); code != http.StatusOK {
		t.Fatal(out)
	}
	_, g2 := srv.do(t, "POST", "/v1/sessions/"+id+"/lock", map[string]any{"name": name})
	code, out := srv.do(t, "POST", "/v1/sessions/"+id+"/unlock", map[string]any{"name": name, "token": g1["token"]})
	if code != http.StatusConflict || out["code"] != "not_held" {
		t.Fatalf("serve: a late unlock of token %v: %d %v", g1["token"], code, out)
	}
	if st := describe(t, cli, name); st.Holder == nil || fmt.Sprint(st.Holder.Token) != fmt.Sprint(g2["token"]) {
		t.Fatalf("serve: the later grant %v after the late unlock: %+v", g2["token"], st.Holder)
	}
}
