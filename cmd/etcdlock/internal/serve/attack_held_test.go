package serve

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// rawStatus sends req (with %[1]s the server's host:port, %[2]s its port)
// on a new connection and returns the answer's status (0 when none).
func rawStatus(t *testing.T, addr, req string) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, fmt.Sprintf(req, addr, port)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestAttackServeCrossSiteHeld: Host, Origin and Content-Type tricks that
// a page (or its DNS rebinding) could send are refused; the server's own
// names pass.
func TestAttackServeCrossSiteHeld(t *testing.T) {
	addr := sharedServer(t, Config{AllowOrigins: []string{"http://ok.example"}})
	for _, tc := range []struct {
		what, req string
		ok        bool
	}{
		{"own address", "GET /v1/state?name=x HTTP/1.1\r\nHost: %[1]s\r\n\r\n", true},
		{"localhost", "GET /v1/state?name=x HTTP/1.1\r\nHost: LOCALHOST:%[2]s\r\n\r\n", true},
		{"localhost trailing dot", "GET /v1/state?name=x HTTP/1.1\r\nHost: localhost.:%[2]s\r\n\r\n", true},
		{"rebinding name", "GET /v1/state?name=x HTTP/1.1\r\nHost: evil.example:%[2]s\r\n\r\n", false},
		{"rebinding name trailing dot", "GET /v1/state?name=x HTTP/1.1\r\nHost: evil.example.:%[2]s\r\n\r\n", false},
		{"sub.localhost", "GET /v1/state?name=x HTTP/1.1\r\nHost: a.localhost:%[2]s\r\n\r\n", false},
		{"no port", "GET /v1/state?name=x HTTP/1.1\r\nHost: localhost\r\n\r\n", false},
		{"other port", "GET /v1/state?name=x HTTP/1.1\r\nHost: localhost:1\r\n\r\n", false},
		{"port leading zero", "GET /v1/state?name=x HTTP/1.1\r\nHost: localhost:0%[2]s\r\n\r\n", false},
		{"ipv6 loopback", "GET /v1/state?name=x HTTP/1.1\r\nHost: [::1]:%[2]s\r\n\r\n", false},
		{"other loopback ip", "GET /v1/state?name=x HTTP/1.1\r\nHost: 127.0.0.2:%[2]s\r\n\r\n", false},
		{"short ip", "GET /v1/state?name=x HTTP/1.1\r\nHost: 127.1:%[2]s\r\n\r\n", false},
		{"userinfo", "GET /v1/state?name=x HTTP/1.1\r\nHost: localhost@evil.example:%[2]s\r\n\r\n", false},
		{"http/1.0 no host", "GET /v1/state?name=x HTTP/1.0\r\n\r\n", false},
		{"absolute-form evil", "GET http://evil.example:%[2]s/v1/state?name=x HTTP/1.1\r\nHost: %[1]s\r\n\r\n", false},
		{"origin null", "GET /v1/state?name=x HTTP/1.1\r\nHost: %[1]s\r\nOrigin: null\r\n\r\n", false},
		{"origin case", "GET /v1/state?name=x HTTP/1.1\r\nHost: %[1]s\r\nOrigin: http://OK.example\r\n\r\n", false},
		{"origin allowed", "GET /v1/state?name=x HTTP/1.1\r\nHost: %[1]s\r\nOrigin: http://ok.example\r\n\r\n", true},
		{"text/plain", "POST /v1/sessions HTTP/1.1\r\nHost: %[1]s\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}", false},
		{"no content-type", "POST /v1/sessions HTTP/1.1\r\nHost: %[1]s\r\nContent-Length: 2\r\n\r\n{}", false},
		{"param smuggling", "POST /v1/sessions HTTP/1.1\r\nHost: %[1]s\r\nContent-Type: text/plain; a=application/json\r\nContent-Length: 2\r\n\r\n{}", false},
		{"chunked text/plain", "POST /v1/sessions HTTP/1.1\r\nHost: %[1]s\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", false},
		{"get body text/plain", "GET /v1/state?name=x HTTP/1.1\r\nHost: %[1]s\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}", false},
		{"json charset", "POST /v1/sessions HTTP/1.1\r\nHost: %[1]s\r\nContent-Type: Application/JSON; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}", true},
	} {
		got := rawStatus(t, addr, tc.req)
		if (got == http.StatusOK) != tc.ok {
			t.Errorf("%s: %d; want ok=%v", tc.what, got, tc.ok)
		}
	}
}

// TestAttackServeParserHeld: duplicate keys however spelled, case, spaces,
// trailing data, a BOM, a non-object are all 400.
func TestAttackServeParserHeld(t *testing.T) {
	addr := sharedServer(t, Config{})
	for _, body := range []string{
		`{"ttl":"5s","ttl":"6s"}`,
		`{"ttl":"5s","t\u0074l":"6s"}`,
		`{"TTL":"5s"}`,
		`{"ttl ":"5s"}`,
		`{"\u0074tl":"5s","identity":"a","identity":"b"}`,
		`{"ttl":"5s"} x`,
		`{"ttl":"5s"}{}`,
		`{"ttl":"5s"}null`,
		"\ufeff{\"ttl\":\"5s\"}",
		`[{"ttl":"5s"}]`,
		`{"ttl":1e999}`,
		`"5s"`,
		`{"ttl":"5s",}`,
		`{"ttl":"5s","identity":{"a":1}}`,
		`{"ttl":"5s","identıty":"x"}`,
		`{"ttl":"5s","ſ":"x"}`,
	} {
		resp, err := http.Post("http://"+addr+"/v1/sessions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: %s %s; want 400", body, resp.Status, b)
		}
	}
}

// TestAttackServeBodyDeadlineSparesStreams: the body deadline (here
// 300 ms) does not cut a hold stream or an observe stream later.
func TestAttackServeBodyDeadlineSparesStreams(t *testing.T) {
	t.Parallel() // its own names; mostly waits
	addr := sharedServer(t, Config{BodyTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	body := fmt.Sprintf(`{"name":%q,"ttl":"3s"}`, embedtest.UniqueName(t, "attack"))
	resp, err := http.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		if line, err := lines.ReadString('\n'); err != nil {
			t.Fatalf("hold stream cut: %q %v", line, err)
		}
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /v1/observe?name=attack/obs HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	r := bufio.NewReader(conn)
	if _, err := http.ReadResponse(r, nil); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = io.Copy(io.Discard, r)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("observe stream ended within 2 s: %v", err)
	}
}
