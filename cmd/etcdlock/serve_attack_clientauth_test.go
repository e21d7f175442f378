//go:build unix

package main

// In cmd/etcdlock, not internal/serve: it runs serve with its --client-auth, TLS and --user flags.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// leases counts the leases in etcd, as root sees them.
func (tm *teams) leases(t *testing.T) int {
	t.Helper()
	resp, err := tm.root.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Leases)
}

// TestAttackClientAuthEmptyPassword: a user name with an empty password
// is no credential. clientv3 logs in only when both are set, so a client
// of "mallory" and "" never logs in, its requests carry no token, and etcd
// (client-cert-auth) takes them as the TLS identity serve dials with: any
// caller without a password must be 401, and leave nothing in etcd.
func TestAttackClientAuthEmptyPassword(t *testing.T) {
	t.Parallel() // its own cluster
	tm := startTeams(t)
	s := startAuthServer(t, tm)
	before := tm.leases(t)
	for _, user := range []string{"mallory", "alice"} {
		for _, tc := range []struct {
			method, path string
			body         any
		}{
			{"POST", "/v1/sessions", map[string]any{"ttl": "10s"}},
			{"POST", "/v1/hold", map[string]any{"name": "team-a/job", "try": true, "ttl": "10s"}},
			{"GET", "/v1/leader?name=team-a/e", nil},
			{"GET", "/v1/state?name=team-a/job", nil},
		} {
			code, out, _ := s.doAs(t, user, "", tc.method, tc.path, tc.body)
			if code != http.StatusUnauthorized {
				t.Errorf("%s with no password: %s %s: %d %v, want 401", user, tc.method, tc.path, code, out)
			}
		}
	}
	if n := tm.leases(t); n != before {
		t.Errorf("%d leases in etcd after requests with no password, want %d", n, before)
	}
}

// TestAttackClientAuthOldPassword: shared leases are per user and ttl,
// not per password. Once alice's password changed, her new one must work
// (not go through a shared lease her old client opened, which etcd now
// refuses), and her old one must take nothing, even while serve still
// has the client it logged in (a request of it came a moment ago) and
// alice, with the new one, has a shared lease of the ttl it asks for.
func TestAttackClientAuthOldPassword(t *testing.T) {
	t.Parallel() // its own cluster
	tm := startTeams(t)
	s := startAuthServer(t, tm)
	old, fresh := tm.alicePW, secret(t, "alice2")
	if code, out, _ := s.doAs(t, "alice", old, "GET", "/v1/leader?name=team-a/e", nil); code != 200 {
		t.Fatalf("alice reads with her password: %d %v", code, out)
	}
	if _, err := tm.root.UserChangePassword(embedtest.Context(t, long), "alice", fresh); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := s.doAs(t, "alice", fresh, "GET", "/v1/leader?name=team-a/e", nil); code != 200 {
		t.Errorf("alice reads with her new password: %d %v, want 200", code, out)
	}
	hold := map[string]any{"name": "team-a/mine", "try": true, "ttl": "7s"}
	if code, out, _ := s.doAs(t, "alice", fresh, "POST", "/v1/hold", hold); code != 200 {
		t.Fatalf("alice holds with her new password: %d %v", code, out)
	}
	stolen := map[string]any{"name": "team-a/stolen", "try": true, "ttl": "7s"}
	if code, out, _ := s.doAs(t, "alice", old, "POST", "/v1/hold", stolen); code == 200 {
		t.Errorf("the old password holds team-a/stolen: %d %v, want refused", code, out)
	}
}

// TestAttackClientAuthMetricsNames: /metrics labels every lock by name;
// alice, whom RBAC keeps out of team-b/, must not learn there from it the
// names bob holds.
func TestAttackClientAuthMetricsNames(t *testing.T) {
	t.Parallel() // its own cluster
	tm := startTeams(t)
	s := startAuthServer(t, tm)
	if code, out, _ := s.doAs(t, "bob", tm.bobPW, "POST", "/v1/hold", map[string]any{"name": "team-b/secret-project", "try": true, "ttl": "10s"}); code != 200 {
		t.Fatalf("bob holds: %d %v", code, out)
	}
	alice, aliceCode := s.metricsAs(t, "alice", tm.alicePW)
	if strings.Contains(alice, "secret-project") {
		t.Errorf("alice's /metrics (%d) names bob's lock team-b/secret-project", aliceCode)
	}
	if root, code := s.metricsAs(t, "root", tm.rootPW); code != 200 || !strings.Contains(root, "secret-project") {
		t.Errorf("root's /metrics: %d, want 200 naming team-b/secret-project", code)
	}
}

// metricsAs reads /metrics as user.
func (s *server) metricsAs(t *testing.T, user, password string) (string, int) {
	t.Helper()
	req, _ := http.NewRequestWithContext(embedtest.Context(t, long), "GET", "http://etcdlock/metrics", nil)
	req.SetBasicAuth(user, password)
	resp, err := s.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode
}

// TestAttackClientAuthWrongPasswordFlood: wrong passwords cost serve a
// dial and etcd a login each; while they are in flight they take places
// among the clients serve keeps (64). A flood of them, from anyone who
// reaches serve without a password, must not turn bob away (429).
func TestAttackClientAuthWrongPasswordFlood(t *testing.T) {
	t.Parallel() // its own cluster
	tm := startTeams(t)
	s := startAuthServer(t, tm)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 128 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", "http://etcdlock/v1/leader?name=team-a/e", nil)
				req.SetBasicAuth(fmt.Sprintf("guess%d", i), fmt.Sprintf("pw%d", n))
				if resp, err := s.HTTP.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	defer wg.Wait()
	defer close(stop)
	time.Sleep(500 * time.Millisecond)
	turned := 0
	for range 10 {
		code, out, _ := s.doAs(t, "bob", tm.bobPW, "GET", "/v1/leader?name=team-b/e", nil)
		if code == http.StatusTooManyRequests {
			turned++
			t.Logf("bob: %d %v", code, out)
		}
		s.HTTP.CloseIdleConnections()
		time.Sleep(50 * time.Millisecond)
	}
	if turned > 0 {
		t.Errorf("bob turned away %d times in 10 by a flood of wrong passwords", turned)
	}
}

// TestAttackClientAuthOldPasswordSession: a session acts through the
// client of the password that opened it. Once alice's password changed,
// her old one (its client still cached) must not lock through a session
// her new one opened: what a password opened, only it uses.
func TestAttackClientAuthOldPasswordSession(t *testing.T) {
	t.Parallel() // its own cluster
	tm := startTeams(t)
	s := startAuthServer(t, tm)
	old, fresh := tm.alicePW, secret(t, "alice2")
	if code, out, _ := s.doAs(t, "alice", old, "GET", "/v1/leader?name=team-a/e", nil); code != 200 {
		t.Fatalf("alice reads with her password: %d %v", code, out)
	}
	if _, err := tm.root.UserChangePassword(embedtest.Context(t, long), "alice", fresh); err != nil {
		t.Fatal(err)
	}
	code, out, _ := s.doAs(t, "alice", fresh, "POST", "/v1/sessions", map[string]any{"ttl": "10s"})
	if code != 200 {
		t.Fatalf("alice's session with her new password: %d %v", code, out)
	}
	id := out["session"].(string)
	stolen := map[string]any{"name": "team-a/stolen", "try": true}
	if code, out, _ := s.doAs(t, "alice", old, "POST", "/v1/sessions/"+id+"/lock", stolen); code == 200 {
		t.Errorf("the old password locks through the new one's session: %d %v, want refused", code, out)
	}
	if n := tm.keysOf(t, "team-a/stolen"); n != 0 {
		t.Errorf("%d keys of team-a/stolen, want none", n)
	}
}

// TestAttackClientAuthOldPasswordCode: a password etcd no longer takes is
// 401 unauthenticated, as a wrong one is, even while serve still has the
// client it logged in: not 503, which tells a client to retry.
func TestAttackClientAuthOldPasswordCode(t *testing.T) {
	t.Parallel() // its own cluster
	tm := startTeams(t)
	s := startAuthServer(t, tm)
	old := tm.alicePW
	if code, out, _ := s.doAs(t, "alice", old, "GET", "/v1/leader?name=team-a/e", nil); code != 200 {
		t.Fatalf("alice reads with her password: %d %v", code, out)
	}
	if _, err := tm.root.UserChangePassword(embedtest.Context(t, long), "alice", secret(t, "alice2")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/leader?name=team-a/e", nil},
		{"GET", "/v1/state?name=team-a/job", nil},
		{"POST", "/v1/hold", map[string]any{"name": "team-a/job", "try": true, "ttl": "10s"}},
		{"POST", "/v1/sessions", map[string]any{"ttl": "10s"}},
	} {
		if code, out, _ := s.doAs(t, "alice", old, tc.method, tc.path, tc.body); code != http.StatusUnauthorized {
			t.Errorf("the old password: %s %s: %d %v, want 401", tc.method, tc.path, code, out)
		}
	}
}
