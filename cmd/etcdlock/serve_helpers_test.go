//go:build unix

package main

// In cmd/etcdlock, not internal/serve: the helpers that run the serve process and talk to it.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// server is a running etcdlock serve, reached over its unix socket (or
// its TCP address, addr).
type server struct {
	p    *proc
	sock string
	addr string // host:port when it listens on TCP
	c    *http.Client
}

// startServer starts etcdlock serve on a unix socket in a temporary
// directory (and TCP, when args asks for it) with the given endpoints'
// flags (the shared cluster's when nil) and waits until it answers.
func startServer(t *testing.T, endpoints []string, args ...string) *server {
	t.Helper()
	return startServerAt(t, filepath.Join(t.TempDir(), "etcdlock.sock"), endpoints, args...)
}

// startServerAt is startServer on the unix socket sock.
func startServerAt(t *testing.T, sock string, endpoints []string, args ...string) *server {
	t.Helper()
	flags := endpointFlags()
	if endpoints != nil {
		flags = []string{"--endpoints", strings.Join(endpoints, ","), "--dial-timeout", "20s", "--command-timeout", "20s"}
	}
	return startServerFlags(t, sock, nil, flags, args...)
}

// startServerFlags is startServerAt with the connection flags given whole,
// and env for the process.
func startServerFlags(t *testing.T, sock string, env, flags []string, args ...string) *server {
	t.Helper()
	p := startRaw(t, env, append(append(flags, "serve", "--socket", sock), args...)...)
	srv := &server{p: p, sock: sock}
	srv.c = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	t.Cleanup(srv.c.CloseIdleConnections)
	re := regexp.MustCompile(`tcp://([0-9.]+:\d+|\[[0-9a-f:]*\]:\d+)`)
	deadline := time.Now().Add(long)
	for {
		// Up once it accepts (the socket file exists from bind, before
		// listen) and, if asked for, has said its TCP address.
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			if m := re.FindStringSubmatch(p.stderr.String()); m != nil {
				srv.addr = m[1]
			}
			if !strings.Contains(strings.Join(args, " "), "--listen") || srv.addr != "" {
				return srv
			}
		}
		select {
		case <-p.done:
			t.Fatalf("serve exited: %s", p.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not up after %v: %s", long, p.stderr.String())
		}
	}
}

// do sends a request with a JSON body (none when body is nil) and returns
// the status and the decoded answer.
func (s *server) do(t *testing.T, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(embedtest.Context(t, long), method, "http://etcdlock"+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: %d, body not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// stream is an open /v1/hold (or /v1/campaign) response.
type stream struct {
	resp   *http.Response
	lines  chan map[string]any
	cancel context.CancelFunc
}

// open starts POST path with body and returns the stream once its status
// is in; first holds the first line when the status is 200.
func (s *server) open(t *testing.T, path string, body any) (st *stream, status int, first map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "POST", "http://etcdlock"+path, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.c.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	st = &stream{resp: resp, lines: make(chan map[string]any, 100), cancel: cancel}
	t.Cleanup(st.close)
	go func() {
		defer close(st.lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				st.lines <- m
			}
		}
	}()
	if resp.StatusCode != http.StatusOK {
		return st, resp.StatusCode, <-st.lines
	}
	select {
	case first = <-st.lines:
	case <-time.After(long):
		t.Fatalf("no first line of %s after %v", path, long)
	}
	return st, resp.StatusCode, first
}

// close ends the request (the client going away).
func (st *stream) close() {
	st.cancel()
	st.resp.Body.Close()
}

// next returns the stream's next line with event ev (nil if it ends).
func (st *stream) next(t *testing.T, ev string) map[string]any {
	t.Helper()
	deadline := time.After(long)
	for {
		select {
		case m, ok := <-st.lines:
			if !ok {
				return nil
			}
			if m["event"] == ev {
				return m
			}
			if m["event"] == "lost" {
				t.Fatalf("lost while waiting for a %q line: %v", ev, m)
			}
		case <-deadline:
			t.Fatalf("no %q line after %v", ev, long)
		}
	}
}

// hold opens a hold of name and fails unless it is granted.
func (s *server) hold(t *testing.T, body map[string]any) (*stream, map[string]any) {
	t.Helper()
	st, code, first := s.open(t, "/v1/hold", body)
	if code != http.StatusOK || first["event"] != "granted" {
		t.Fatalf("hold %v: %d %v", body, code, first)
	}
	return st, first
}

// tokenOf returns a line's token as a number.
func tokenOf(t *testing.T, m map[string]any) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(fmt.Sprint(m["token"]), &n); err != nil || n <= 0 {
		t.Fatalf("token of %v: %v", m, err)
	}
	return n
}

// keysOf returns the keys of name's holders and waiters.
func keysOf(t *testing.T, name string) []string {
	t.Helper()
	st := describe(t, cluster.TestClient(t), name)
	var keys []string
	for _, e := range append(st.Holders, st.Waiters...) {
		keys = append(keys, e.Key)
	}
	return keys
}
