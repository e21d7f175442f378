package serve

import (
	"net/http"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestServeKinds: a semaphore of 2 admits two HTTP holders and queues a
// third; readers share and a writer waits; /v1/state shows them.
func TestServeKinds(t *testing.T) {
	srv := startServer(t, nil, Config{})
	sem := embedtest.UniqueName(t, "serve")
	srv.Hold(t, map[string]any{"name": sem, "kind": "semaphore", "n": 2, "identity": "s1"})
	srv.Hold(t, map[string]any{"name": sem, "kind": "semaphore", "n": 2, "identity": "s2"})
	if _, code, first := srv.Open(t, "/v1/hold", map[string]any{"name": sem, "kind": "semaphore", "n": 2, "try": true}); code != http.StatusConflict || first["code"] != "locked" {
		t.Fatalf("a third try of a semaphore of 2: %d %v", code, first)
	}
	code, st := srv.Do(t, "GET", "/v1/state?name="+sem, nil)
	if holders, _ := st["holders"].([]any); code != http.StatusOK || len(holders) != 2 {
		t.Fatalf("state: %d %v", code, st)
	}
	rw := embedtest.UniqueName(t, "serve")
	srv.Hold(t, map[string]any{"name": rw, "kind": "read"})
	srv.Hold(t, map[string]any{"name": rw, "kind": "read"})
	if _, code, first := srv.Open(t, "/v1/hold", map[string]any{"name": rw, "kind": "write", "wait": "200ms"}); code != http.StatusRequestTimeout || first["code"] != "timeout" {
		t.Fatalf("a writer behind readers, wait 200ms: %d %v", code, first)
	}
	if keys := srv.keysOf(t, rw); len(keys) != 2 {
		t.Fatalf("keys after the writer's wait ran out: %v", keys)
	}
}
