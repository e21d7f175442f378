//go:build unix

package main

// In cmd/etcdlock, not internal/serve: it sends SIGTERM to the serve process.

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestAttackServeUnreadBodyStop: one connection that sends a request's
// headers with a Content-Length and no body (to a route that reads no
// body: here a 404) keeps etcdlock serve from stopping on SIGTERM for
// Shutdown's 10 s, after which it exits non-zero ("serve: context
// deadline exceeded").
func TestAttackServeUnreadBodyStop(t *testing.T) {
	srv := startServer(t, nil)
	conn, err := net.Dial("unix", srv.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/nowhere HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	srv.p.signal(syscall.SIGTERM)
	stopped := time.Now()
	code, _ := srv.p.wait()
	if d := time.Since(stopped); code != 0 || d > 5*time.Second {
		t.Fatalf("exit %d %v after SIGTERM; want 0 at once; stderr %s", code, d.Round(time.Millisecond), srv.p.stderr.String())
	}
}
