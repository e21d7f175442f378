//go:build unix

package main

// In cmd/etcdlock, not internal/serve: it checks the process's --auth-token-file and its /metrics.

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestServeAuthAndMetrics: with --auth-token-file every request needs the
// bearer token (403 permission_denied without it); /metrics counts the
// errors by code and the open streams.
func TestServeAuthAndMetrics(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, nil, "--auth-token-file", tokenFile)
	name := embedtest.UniqueName(t, "cli")
	if code, out := srv.Do(t, "POST", "/v1/hold", map[string]any{"name": name}); code != http.StatusForbidden || out["code"] != "permission_denied" {
		t.Fatalf("without the token: %d %v", code, out)
	}
	srv.HTTP.Transport = bearer{srv.HTTP.Transport, "s3cret"}
	srv.Hold(t, map[string]any{"name": name})
	req, _ := http.NewRequest("GET", "http://etcdlock/metrics", nil)
	resp, err := srv.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`etcdlock_serve_request_errors_total{code="permission_denied"} 1`, "etcdlock_serve_open_streams 1", "etcdlock_acquisitions_total"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if keys := keysOf(t, name); len(keys) != 1 {
		t.Fatalf("keys: %v", keys)
	}
}

// bearer adds a bearer token to every request.
type bearer struct {
	rt    http.RoundTripper
	token string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}
