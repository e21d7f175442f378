package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// post sends body to path on addr and returns the status, the Retry-After
// header and, for a JSON answer, its code; the response stays open (a
// stream) until cleanup.
func post(t *testing.T, addr, path, body string) (status int, retry, code string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	line, _ := bufio.NewReader(resp.Body).ReadBytes('\n')
	var out struct{ Code string }
	_ = json.Unmarshal(line, &out)
	return resp.StatusCode, resp.Header.Get("Retry-After"), out.Code
}

// TestLimitsPerClient: one client floods the server with sessions and with
// holds; from the bound on it is refused 429 too_many with a Retry-After,
// and etcd's leases stay bounded; a session closed frees its place.
func TestLimitsPerClient(t *testing.T) {
	c, _, addr := startTestServer(t, Config{MaxClientSessions: 5, MaxClientStreams: 3})
	cli := c.TestClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := floodSessions(t, addr, 20, 5)
	if resp, err := cli.Leases(ctx); err != nil || len(resp.Leases) != 5 {
		t.Fatalf("leases after the flood: %v %v; want 5", resp, err)
	}
	req, _ := http.NewRequest("DELETE", "http://"+addr+"/v1/sessions/"+ids[0], nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("close: %v %v", resp, err)
	}
	if status, _, code := post(t, addr, "/v1/sessions", `{}`); status != http.StatusOK {
		t.Fatalf("a session after one closed: %d %s", status, code)
	}
	for i := range 4 {
		status, retry, code := post(t, addr, "/v1/hold", `{"name":"limits/`+string(rune('a'+i))+`"}`)
		ok := status == http.StatusOK
		if i == 3 {
			ok = status == http.StatusTooManyRequests && code == "too_many" && retry != ""
		}
		if !ok {
			t.Fatalf("hold %d: %d %s (Retry-After %q)", i, status, code, retry)
		}
	}
}

// floodSessions opens n sessions on addr; the first bound must open, the
// rest be refused 429 too_many with a Retry-After. It returns the ids.
func floodSessions(t *testing.T, addr string, n, bound int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		resp, err := http.Post("http://"+addr+"/v1/sessions", "application/json", strings.NewReader(`{"ttl":"1h"}`))
		if err != nil {
			t.Fatal(err)
		}
		var out struct{ Session, Code string }
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		opened := i < bound && resp.StatusCode == http.StatusOK
		refused := i >= bound && resp.StatusCode == http.StatusTooManyRequests && out.Code == "too_many" && resp.Header.Get("Retry-After") != ""
		if !opened && !refused {
			t.Fatalf("session %d: %d %+v (Retry-After %q)", i, resp.StatusCode, out, resp.Header.Get("Retry-After"))
		}
		if opened {
			ids = append(ids, out.Session)
		}
	}
	return ids
}

// TestBodyStoppedMidwayIsCut: a request whose body stops midway is
// answered and its connection closed within the body timeout; an idle
// connection is closed within the idle timeout.
func TestBodyStoppedMidwayIsCut(t *testing.T) {
	const bound = 500 * time.Millisecond
	addr := sharedServer(t, Config{BodyTimeout: bound, IdleTimeout: bound})
	for _, tc := range []struct{ what, req string }{
		{"body stopped midway", "POST /v1/hold HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"name\":"},
		{"idle after a request", "GET /v1/state?name=x HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			if _, err := io.WriteString(conn, tc.req); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.Copy(io.Discard, conn); err != nil { // to the server's close
				t.Fatalf("the server did not close the connection: %v", err)
			}
			if d := time.Since(start); d > 10*bound {
				t.Fatalf("closed after %v; want within about %v", d, bound)
			}
		})
	}
}
