package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
)

// The tests run against one embedded etcd member shared by the package
// (each test under a prefix of its own) and wait for events, with
// generous bounds for a busy machine under -race.

var cluster *embedtest.Cluster

const long = 20 * time.Second

// holderEnv and endpointsEnv make the test binary a holder process (see
// startHolder).
const (
	holderEnv    = "ETCDLOCK_UI_TEST_HOLD"
	endpointsEnv = "ETCDLOCK_UI_TEST_ENDPOINTS"
)

func TestMain(m *testing.M) {
	if name := os.Getenv(holderEnv); name != "" {
		os.Exit(hold(name))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c, err := embedtest.New(ctx, embedtest.WithMembers(1))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start etcd:", err)
		os.Exit(2)
	}
	cluster = c
	code := m.Run()
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close etcd:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(append(embedtest.LeakOptions(),
			goleak.IgnoreAnyFunction("github.com/chromedp/chromedp.NewExecAllocator.func2"))...,
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// hold is the holder process: it takes name with a session of holderTTL,
// prints the grant's token and waits to be killed.
func hold(name string) int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(os.Getenv(endpointsEnv), ","), DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	s, err := etcdlock.NewSession(ctx, cli, etcdlock.WithTTL(holderTTL), etcdlock.WithIdentity("holder-process"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	l, err := etcdlock.NewMutex(s, name).Lock(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	fmt.Println(l.Token())
	select {} // until SIGKILL
}

var seq atomic.Int64

// uniquePrefix returns a name prefix no other test uses.
func uniquePrefix(t testing.TB) string {
	return fmt.Sprintf("ui-test/%s-%d/", strings.ReplaceAll(t.Name(), "/", "."), seq.Add(1))
}

// lock takes name as identity, held until cleanup.
func lock(t testing.TB, cli *clientv3.Client, name, identity string) *etcdlock.Lock {
	t.Helper()
	l, err := etcdlock.NewMutex(locktest.OpenSession(t, cli, etcdlock.WithIdentity(identity)), name).Lock(embedtest.Context(t, long))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startUI runs a Server for cfg behind an httptest server until cleanup.
func startUI(t testing.TB, cli *clientv3.Client, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	srv, err := New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Run(ctx)
	}()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		cancel()
		<-done // ends the streams first, so Close need not wait for them
		hs.Close()
	})
	return srv, hs
}

// getJSON GETs path into v and returns the status code.
func getJSON(t testing.TB, hs *httptest.Server, path string, v any) int {
	t.Helper()
	resp, err := hs.Client().Get(hs.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode
}

// waitLocks polls /api/locks (the test's client, not etcd) until cond
// holds.
func waitLocks(t testing.TB, hs *httptest.Server, query string, what string, cond func(locksJSON) bool) locksJSON {
	t.Helper()
	deadline := time.Now().Add(long)
	for {
		var got locksJSON
		if code := getJSON(t, hs, "/api/locks"+query, &got); code == http.StatusOK && cond(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v: %+v", what, long, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sse is an open event stream.
type sse struct {
	events chan [2]string // event, data
	cancel context.CancelFunc
	unread []event // timeline events of a message that waitEvent has not looked at yet
}

// openStream opens /api/stream; it is closed at cleanup.
func openStream(t testing.TB, hs *httptest.Server) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/api/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	s := &sse{events: make(chan [2]string, 1000), cancel: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				s.events <- [2]string{ev, strings.TrimPrefix(line, "data: ")}
			}
		}
		close(s.events)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

// waitEvent returns the first timeline event of the stream, after those
// already returned, that matches (the others are passed over).
func (s *sse) waitEvent(t testing.TB, d time.Duration, match func(event) bool) event {
	t.Helper()
	deadline := time.After(d)
	var seen []string
	for {
		for len(s.unread) > 0 {
			ev := s.unread[0]
			s.unread = s.unread[1:]
			if match(ev) {
				return ev
			}
			seen = append(seen, fmt.Sprintf("%s %s #%d %s", ev.Kind, ev.Name, ev.Token, ev.Identity))
		}
		select {
		case m, ok := <-s.events:
			if !ok {
				t.Fatal("the stream ended")
			}
			if m[0] != "timeline" {
				continue
			}
			var tl timelineJSON
			if err := json.Unmarshal([]byte(m[1]), &tl); err != nil {
				t.Fatal(err)
			}
			s.unread = tl.Events
		case <-deadline:
			t.Fatalf("no matching timeline event within %v; saw %q", d, seen)
		}
	}
}
