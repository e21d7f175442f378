//go:build unix

package main

// In cmd/etcdlock, not internal/serve: it runs serve with its --client-auth, TLS and --user flags.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// startAuthServer starts serve with --client-auth etcd on the teams'
// cluster, its own etcd user root.
func startAuthServer(t *testing.T, tm *teams, args ...string) *server {
	t.Helper()
	flags := append(append([]string{}, tm.tls...), "--user", "root")
	env := []string{"ETCDCTL_PASSWORD=" + tm.rootPW}
	return startServerFlags(t, filepath.Join(t.TempDir(), "s.sock"), env, flags, append([]string{"--client-auth", "etcd"}, args...)...)
}

// doAs sends a request as user (no credentials when user is "") and
// returns the status, the answer and its WWW-Authenticate header.
func (s *server) doAs(t *testing.T, user, password, method, path string, body any) (int, map[string]any, string) {
	t.Helper()
	var r *bytes.Reader
	if body == nil {
		r = bytes.NewReader(nil)
	} else {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(embedtest.Context(t, long), method, "http://etcdlock"+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	dec := json.NewDecoder(resp.Body)
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("%s %s: %d, body not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, out, resp.Header.Get("WWW-Authenticate")
}

// keysOf counts the keys of every name under prefix, as root reads them.
func (tm *teams) keysOf(t *testing.T, prefix string) int {
	t.Helper()
	resp, err := tm.root.Get(context.Background(), layout.ListPrefix(prefix), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return int(resp.Count)
}

// TestServeClientAuth: with --client-auth etcd, each request acts as the
// etcd user its Basic credentials name, so RBAC confines alice to team-a/
// and bob to team-b/ through one serve whose own user (root) may do
// anything; missing or wrong credentials are 401 with nothing written, and
// what one user opened (a session, a hold) the other cannot use.
func TestServeClientAuth(t *testing.T) {
	t.Parallel() // its own cluster
	tm := startTeams(t)
	s := startAuthServer(t, tm)
	hold := map[string]any{"name": "team-a/job", "try": true}
	for _, tc := range []struct{ what, user, pw string }{
		{"no credentials", "", ""},
		{"a wrong password", "alice", tm.bobPW},
		{"an unknown user", "mallory", tm.alicePW},
	} {
		code, out, challenge := s.doAs(t, tc.user, tc.pw, "POST", "/v1/sessions", map[string]any{"ttl": "10s"})
		if code != http.StatusUnauthorized || out["code"] != "unauthenticated" || !strings.HasPrefix(challenge, "Basic ") {
			t.Errorf("%s: %d %v (WWW-Authenticate %q), want 401 unauthenticated with a Basic challenge", tc.what, code, out, challenge)
		}
	}
	if n := tm.keysOf(t, "team-"); n != 0 {
		t.Fatalf("%d keys under team-* after refused requests, want none", n)
	}
	code, out, _ := s.doAs(t, "alice", tm.alicePW, "POST", "/v1/sessions", map[string]any{"ttl": "10s"})
	if code != http.StatusOK {
		t.Fatalf("alice's session: %d %v", code, out)
	}
	aliceSession := out["session"].(string)
	for _, tc := range []struct {
		what, user, pw, path string
		body                 any
		want                 int
		code                 string
	}{
		{"alice locks her name", "alice", tm.alicePW, "/v1/sessions/" + aliceSession + "/lock", hold, 200, ""},
		{"alice locks bob's name", "alice", tm.alicePW, "/v1/sessions/" + aliceSession + "/lock", map[string]any{"name": "team-b/job", "try": true}, 403, "permission_denied"},
		{"bob uses alice's session", "bob", tm.bobPW, "/v1/sessions/" + aliceSession + "/lock", map[string]any{"name": "team-b/job", "try": true}, 404, "session_expired"},
		{"bob keeps alice's session alive", "bob", tm.bobPW, "/v1/sessions/" + aliceSession + "/keepalive", nil, 404, "session_expired"},
	} {
		code, out, _ := s.doAs(t, tc.user, tc.pw, "POST", tc.path, tc.body)
		if code != tc.want || (tc.code != "" && out["code"] != tc.code) {
			t.Errorf("%s: %d %v, want %d %s", tc.what, code, out, tc.want, tc.code)
		}
	}
	if n := tm.keysOf(t, "team-b/"); n != 0 {
		t.Fatalf("%d keys under team-b/ after alice and a stolen session tried it, want none", n)
	}
	if code, out, _ := s.doAs(t, "alice", tm.alicePW, "GET", "/v1/state?name=team-b/job", nil); code != 403 {
		t.Errorf("alice reads bob's state: %d %v, want 403", code, out)
	}
	if code, out, _ := s.doAs(t, "bob", tm.bobPW, "POST", "/v1/hold", map[string]any{"name": "team-b/job", "try": true, "ttl": "10s"}); code != 200 {
		t.Errorf("bob holds his name: %d %v, want 200 (a stream)", code, out)
	}
	if code, out, _ := s.doAs(t, "root", tm.rootPW, "GET", "/v1/state?name=team-b/job", nil); code != 200 {
		t.Errorf("root reads the state: %d %v", code, out)
	}
	tm.noSecret(t, "serve's log", s.p.stderr.String())
}
