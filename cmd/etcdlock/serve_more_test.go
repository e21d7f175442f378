//go:build unix

package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
)

// TestServeElection: a campaign stream is elected, /v1/leader and
// /v1/observe show it, a second candidate waits and leads once the first
// stream closes.
func TestServeElection(t *testing.T) {
	srv := startServer(t, nil)
	name := embedtest.UniqueName(t, "cli")
	first, code, line := srv.open(t, "/v1/campaign", map[string]any{"name": name, "value": "10.0.0.1:80"})
	if code != http.StatusOK || line["event"] != "elected" {
		t.Fatalf("campaign: %d %v", code, line)
	}
	code, out := srv.do(t, "GET", "/v1/leader?name="+name, nil)
	leader, _ := out["leader"].(map[string]any)
	if code != http.StatusOK || leader["value"] != "10.0.0.1:80" || leader["token"] != line["token"] {
		t.Fatalf("leader: %d %v", code, out)
	}
	events := srv.observe(t, name)
	if ev := <-events; !strings.Contains(ev, `"10.0.0.1:80"`) {
		t.Fatalf("first observed leader: %q", ev)
	}
	secondCh := make(chan map[string]any, 1)
	go func() {
		_, _, l := srv.open(t, "/v1/campaign", map[string]any{"name": name, "value": "10.0.0.2:80"})
		secondCh <- l
	}()
	waitState(t, cluster.TestClient(t), name, "the second candidate", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	first.close()
	if l := <-secondCh; l["event"] != "elected" || tokenOf(t, l) <= tokenOf(t, line) {
		t.Fatalf("second candidate: %v", l)
	}
	deadline := time.After(long)
	for {
		select {
		case ev := <-events:
			if strings.Contains(ev, `"10.0.0.2:80"`) {
				return
			}
		case <-deadline:
			t.Fatal("observe never showed the second leader")
		}
	}
}

// observe opens /v1/observe for name and returns its events' data.
func (s *server) observe(t *testing.T, name string) <-chan string {
	t.Helper()
	req, err := http.NewRequestWithContext(embedtest.Context(t, long), "GET", "http://etcdlock/v1/observe?name="+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.c.Do(req)
	if err != nil || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("observe: %v %v", resp, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	ch := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				ch <- d
			}
		}
	}()
	return ch
}

// TestServeKinds: a semaphore of 2 admits two HTTP holders and queues a
// third; readers share and a writer waits; /v1/state shows them.
func TestServeKinds(t *testing.T) {
	srv := startServer(t, nil)
	sem := embedtest.UniqueName(t, "cli")
	srv.hold(t, map[string]any{"name": sem, "kind": "semaphore", "n": 2, "identity": "s1"})
	srv.hold(t, map[string]any{"name": sem, "kind": "semaphore", "n": 2, "identity": "s2"})
	if _, code, first := srv.open(t, "/v1/hold", map[string]any{"name": sem, "kind": "semaphore", "n": 2, "try": true}); code != http.StatusConflict || first["code"] != "locked" {
		t.Fatalf("a third try of a semaphore of 2: %d %v", code, first)
	}
	code, st := srv.do(t, "GET", "/v1/state?name="+sem, nil)
	if holders, _ := st["holders"].([]any); code != http.StatusOK || len(holders) != 2 {
		t.Fatalf("state: %d %v", code, st)
	}
	rw := embedtest.UniqueName(t, "cli")
	srv.hold(t, map[string]any{"name": rw, "kind": "read"})
	srv.hold(t, map[string]any{"name": rw, "kind": "read"})
	if _, code, first := srv.open(t, "/v1/hold", map[string]any{"name": rw, "kind": "write", "wait": "200ms"}); code != http.StatusRequestTimeout || first["code"] != "timeout" {
		t.Fatalf("a writer behind readers, wait 200ms: %d %v", code, first)
	}
	if keys := keysOf(t, rw); len(keys) != 2 {
		t.Fatalf("keys after the writer's wait ran out: %v", keys)
	}
}

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
	if code, out := srv.do(t, "POST", "/v1/hold", map[string]any{"name": name}); code != http.StatusForbidden || out["code"] != "permission_denied" {
		t.Fatalf("without the token: %d %v", code, out)
	}
	srv.c.Transport = bearer{srv.c.Transport, "s3cret"}
	srv.hold(t, map[string]any{"name": name})
	req, _ := http.NewRequest("GET", "http://etcdlock/metrics", nil)
	resp, err := srv.c.Do(req)
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
