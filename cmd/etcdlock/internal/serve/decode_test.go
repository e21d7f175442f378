package serve

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestServeBadInput: each bad request gets its code and status, and leaves
// nothing in etcd.
func TestServeBadInput(t *testing.T) {
	srv := startServer(t, nil, Config{})
	name := embedtest.UniqueName(t, "serve")
	_, sess := srv.Do(t, "POST", "/v1/sessions", map[string]any{})
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
			code, out := srv.Do(t, tc.method, tc.path, tc.body)
			if code != tc.status || out["code"] != tc.code || out["error"] == "" {
				t.Fatalf("%d %v; want %d %s", code, out, tc.status, tc.code)
			}
		})
	}
	if keys := srv.keysOf(t, name); len(keys) != 0 {
		t.Fatalf("keys left under %s: %v", name, keys)
	}
	// A kind mismatch, and a Try of a held name.
	st, _ := srv.Hold(t, map[string]any{"name": name})
	for body, want := range map[string]string{`{"kind":"read"}`: "kind_mismatch", `{"try":true}`: "locked"} {
		req := map[string]any{"name": name}
		if body == `{"kind":"read"}` {
			req["kind"] = "read"
		} else {
			req["try"] = true
		}
		if _, code, first := srv.Open(t, "/v1/hold", req); code != http.StatusConflict || first["code"] != want {
			t.Fatalf("%s on a held mutex: %d %v", body, code, first)
		}
	}
	st.Close()
}
