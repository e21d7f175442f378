package serve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAttackServeUnreadBodyHoldsConn: a request whose body the server
// never reads (an answer before decode: 401, 403, 415, 404, 405, or a
// route without a body: keepalive, DELETE, GET) declares a Content-Length
// and sends no body. net/http drains the body before it writes the answer,
// with no read deadline (BodyTimeout is set only by decode), so the
// connection and its goroutine stay forever: an unauthenticated client
// holds as many as it opens, outside every bound.
func TestAttackServeUnreadBodyHoldsConn(t *testing.T) {
	addr := sharedServer(t, Config{AuthToken: "secret", BodyTimeout: time.Second})
	cases := []struct{ name, head string }{
		{"401 no token", "POST /v1/hold HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"},
		{"404 with token", "POST /v1/nowhere HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer secret\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"},
		{"keepalive with token", "POST /v1/sessions/x/keepalive HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer secret\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := fmt.Fprintf(conn, tc.head, addr); err != nil {
				t.Fatal(err)
			}
			// BodyTimeout is 1 s: within 4 s the server must have
			// answered or closed the connection.
			_ = conn.SetReadDeadline(time.Now().Add(4 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("no answer and the connection still open 4 s after the headers (BodyTimeout 1 s): the unread body holds it with no deadline")
			}
			if err == nil {
				t.Logf("answered %s", resp.Status)
				resp.Body.Close()
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Logf("closed: %v", err)
			}
		})
	}
}

// TestAttackServeNullBody: decode promises "one object" and
// invalid_argument for anything else, but the body `null` decodes into the
// zero request: POST /v1/sessions with `null` opens a session.
func TestAttackServeNullBody(t *testing.T) {
	addr := sharedServer(t, Config{})
	resp, err := http.Post("http://"+addr+"/v1/sessions", "application/json", strings.NewReader(`null`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("body null: %s %s; want 400 invalid_argument", resp.Status, b)
	}
}

// TestAttackServeUncleanPathNotJSON: 404 and 405 answer the JSON error
// shape, but a path the mux cleans (//, /./, /../) is answered by the
// mux's own 301 with an HTML body, before any route or unrouted runs.
func TestAttackServeUncleanPathNotJSON(t *testing.T) {
	addr := sharedServer(t, Config{})
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/v1//hold", "/v1/./hold", "//nowhere"} {
		resp, err := c.Post("http://"+addr+path, "application/json", strings.NewReader(`{"name":"a"}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("POST %s: %s %s %q; want the JSON error shape", path, resp.Status, ct, b)
		}
	}
}

// TestAttackServeUnreadBodyDelaysStop: one unauthenticated connection of
// the kind above makes the server's stop wait Shutdown's 10 s, and Serve
// then return an error (etcdlock serve exits non-zero on SIGTERM); the
// connection's goroutine outlives Serve.
func TestAttackServeUnreadBodyDelaysStop(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(1))
	srv, err := New(c.TestClient(t), Config{AuthToken: "secret", BodyTimeout: time.Second,
		State: func(context.Context, *clientv3.Client, string) (any, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	addr := ln.Addr().String()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/hold HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n", addr)
	time.Sleep(2 * time.Second)
	start := time.Now()
	cancel()
	err = <-served
	if d := time.Since(start); d > 3*time.Second || err != nil {
		t.Fatalf("Serve returned %v after its context ended: %v", d.Round(time.Millisecond), err)
	}
}
