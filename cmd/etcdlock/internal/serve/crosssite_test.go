package serve

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock/embedtest"
)

// TestServeRefusesCrossSite: what a web page could send is refused before
// anything is written: a simple POST (text/plain) from another origin, a
// JSON POST with a foreign Origin, a request whose Host names another
// server (DNS rebinding), and a body that is not JSON. An Origin given
// with --allow-origin, and a Host given with --allow-host, are served.
func TestServeRefusesCrossSite(t *testing.T) {
	srv := startServer(t, nil, Config{AllowOrigins: []string{"https://ops.example"}, AllowHosts: []string{"locks.internal"}})
	port := srv.addr[strings.LastIndex(srv.addr, ":")+1:]
	for _, tc := range []struct {
		what       string
		host       string // "" for the address itself
		origin, ct string
		status     int
		code       string
	}{
		{"simple POST from a page", "", "http://evil.example", "text/plain", 403, "forbidden_origin"},
		{"JSON from a foreign origin", "", "http://evil.example", "application/json", 403, "forbidden_origin"},
		{"rebinding host", "evil.example:" + port, "", "application/json", 403, "forbidden_origin"},
		{"localhost on another port", "localhost:1", "", "application/json", 403, "forbidden_origin"},
		{"text body", "", "", "text/plain", 415, "invalid_argument"},
		{"form body", "", "", "application/x-www-form-urlencoded", 415, "invalid_argument"},
		{"no content type", "", "", "", 415, "invalid_argument"},
		{"allowed origin", "", "https://ops.example", "application/json", 200, ""},
		{"localhost", "localhost:" + port, "", "application/json; charset=utf-8", 200, ""},
		{"allowed host", "LOCKS.internal:" + port, "", "application/json", 200, ""},
	} {
		t.Run(tc.what, func(t *testing.T) {
			name := embedtest.UniqueName(t, "serve")
			body := `{"name":"` + name + `","try":true}`
			req, err := http.NewRequestWithContext(embedtest.Context(t, long), "POST", "http://"+srv.addr+"/v1/hold", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.ct != "" {
				req.Header.Set("Content-Type", tc.ct)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			// An error answer ends; a grant's stream goes on until closed
			// (which releases it): its first line is enough.
			b, _ := bufio.NewReader(resp.Body).ReadBytes('\n')
			resp.Body.Close()
			if resp.StatusCode != tc.status || (tc.code != "" && !strings.Contains(string(b), `"code":"`+tc.code+`"`)) {
				t.Fatalf("%d %s; want %d %s", resp.StatusCode, b, tc.status, tc.code)
			}
			if tc.status == 200 && !strings.Contains(string(b), `"event":"granted"`) {
				t.Fatalf("first line %s; want a grant", b)
			}
			if keys := srv.keysOf(t, name); tc.status != 200 && len(keys) != 0 {
				t.Fatalf("a refused request left keys: %v", keys)
			}
		})
	}
}
