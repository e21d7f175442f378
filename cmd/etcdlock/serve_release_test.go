//go:build unix

package main

// In cmd/etcdlock, not internal/serve: it needs the process's unix socket and TCP address, two clients.

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/servetest"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestServeReleaseHold: DELETE /v1/holds/{id} answers once the grant's
// guarded delete has committed, the stream says "released" and ends, and
// the same client's next hold of the name is granted at once, queued
// behind nothing. A second DELETE, and a DELETE from another client (here
// over TCP, the hold over the unix socket), are 404 not_held.
func TestServeReleaseHold(t *testing.T) {
	srv := startServer(t, nil, "--listen", "127.0.0.1:0")
	name := embedtest.UniqueName(t, "cli")
	st, code, first := srv.Open(t, "/v1/hold", map[string]any{"name": name})
	id, _ := first["hold"].(string)
	if code != http.StatusOK || first["event"] != "granted" || len(id) != 32 {
		t.Fatalf("hold: %d %v; want a grant with a 128-bit hold id", code, first)
	}
	deleteFromAnotherClient(t, srv.addr, id, name)
	code, out := srv.Do(t, "DELETE", "/v1/holds/"+id, nil)
	if code != http.StatusOK || out["released"] != true || out["name"] != name || out["token"] != first["token"] {
		t.Fatalf("DELETE: %d %v; want released, with the grant's name and token", code, out)
	}
	if st := locktest.Describe(t, cluster.TestClient(t), name); st.Holder != nil || len(st.Waiters) != 0 {
		t.Fatalf("after DELETE answered: %+v; want the name free", st)
	}
	checkReleasedLine(t, st)
	_, code, again := srv.Open(t, "/v1/hold", map[string]any{"name": name, "try": true})
	if code != http.StatusOK || again["event"] != "granted" {
		t.Fatalf("the next hold: %d %v; want granted at once", code, again)
	}
	if a, b := holdToken(t, first["token"]), holdToken(t, again["token"]); b <= a {
		t.Fatalf("tokens %d then %d; want growing", a, b)
	}
	if code, out := srv.Do(t, "DELETE", "/v1/holds/"+id, nil); code != http.StatusNotFound || out["code"] != "not_held" {
		t.Fatalf("a second DELETE: %d %v; want 404 not_held", code, out)
	}
}

func holdToken(t *testing.T, v any) etcdlock.Token {
	t.Helper()
	s, _ := v.(string)
	tok, err := etcdlock.ParseToken(s)
	if err != nil {
		t.Fatalf("token %v: %v", v, err)
	}
	return tok
}

// deleteFromAnotherClient sends DELETE /v1/holds/id over TCP (the hold was
// taken over the unix socket: another client) and wants 404 not_held,
// name still held.
func deleteFromAnotherClient(t *testing.T, addr, id, name string) {
	t.Helper()
	req, err := http.NewRequestWithContext(embedtest.Context(t, long), "DELETE", "http://"+addr+"/v1/holds/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"code":"not_held"`) {
		t.Fatalf("DELETE by another client: %d %s; want 404 not_held", resp.StatusCode, b)
	}
	if locktest.Describe(t, cluster.TestClient(t), name).Holder == nil {
		t.Fatal("the hold went after another client's DELETE")
	}
}

// checkReleasedLine wants st's next line to be "released", then its end.
func checkReleasedLine(t *testing.T, st *servetest.Stream) {
	t.Helper()
	if m := st.Next(t, "released"); m == nil {
		t.Fatal("the stream ended without a released line")
	}
	if _, ok := <-st.Lines(); ok {
		t.Fatal("the stream went on after released")
	}
}
