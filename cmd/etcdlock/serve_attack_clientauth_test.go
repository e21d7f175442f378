//go:build unix

package main

import (
	"context"
	"net/http"
	"testing"
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
