package serve

// This file holds the client side of the behaviour tests of the API (the
// tests that came from cmd/etcdlock, where they ran against the serve
// process): a server in process on TCP, requests and streams to it, and
// reads of the names' state in etcd.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/lockjson"
	"github.com/etcdlock/etcdlock/embedtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// long bounds every wait for something that should happen soon, generous
// for a busy machine under -race.
const long = 30 * time.Second

// server is a running Server, with a client of its cluster.
type server struct {
	addr string
	c    *http.Client
	cli  *clientv3.Client
}

// startServer starts a server of cfg on c (the shared cluster when nil). /v1/state answers with the lock's state as status -o json
// shows it (without the leases' time left).
func startServer(t *testing.T, c *embedtest.Cluster, cfg Config) *server {
	t.Helper()
	if c == nil {
		c = shared
	}
	cli := c.TestClient(t)
	if cfg.State == nil {
		cfg.State = func(ctx context.Context, cli *clientv3.Client, name string) (any, error) {
			st, err := etcdlock.Describe(ctx, cli, name)
			if err != nil {
				return nil, err
			}
			return lockjson.FromState(st, nil, time.Now()), nil
		}
	}
	_, addr := serveOn(t, cli, cfg)
	srv := &server{addr: addr, c: &http.Client{Transport: &http.Transport{}}, cli: cli}
	t.Cleanup(srv.c.CloseIdleConnections)
	return srv
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
	req, err := http.NewRequestWithContext(embedtest.Context(t, long), method, "http://"+s.addr+path, r)
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
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+s.addr+path, bytes.NewReader(b))
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

// observe opens /v1/observe for name and returns its events' data.
func (s *server) observe(t *testing.T, name string) <-chan string {
	t.Helper()
	req, err := http.NewRequestWithContext(embedtest.Context(t, long), "GET", "http://"+s.addr+"/v1/observe?name="+name, nil)
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

// tokenOf returns a line's token as a number.
func tokenOf(t *testing.T, m map[string]any) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(fmt.Sprint(m["token"]), &n); err != nil || n <= 0 {
		t.Fatalf("token of %v: %v", m, err)
	}
	return n
}

// describe reads name's state.
func describe(t testing.TB, cli *clientv3.Client, name string) *etcdlock.LockState {
	t.Helper()
	st, err := etcdlock.Describe(embedtest.Context(t, long), cli, name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitState polls name's state until cond holds.
func waitState(t testing.TB, cli *clientv3.Client, name, what string, cond func(*etcdlock.LockState) bool) *etcdlock.LockState {
	t.Helper()
	deadline := time.Now().Add(long)
	for {
		st := describe(t, cli, name)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s on %q; last state: holder %v, %d waiters", what, name, st.Holder, len(st.Waiters))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// keysOf returns the keys of name's holders and waiters.
func (s *server) keysOf(t *testing.T, name string) []string {
	t.Helper()
	st := describe(t, s.cli, name)
	var keys []string
	for _, e := range append(st.Holders, st.Waiters...) {
		keys = append(keys, e.Key)
	}
	return keys
}

// identities returns the identities of es.
func identities(es []etcdlock.Entry) []string {
	var ids []string
	for _, e := range es {
		ids = append(ids, e.Identity)
	}
	return ids
}
