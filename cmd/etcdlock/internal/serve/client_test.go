package serve

// This file holds the client side of the behaviour tests of the API (the
// tests that came from cmd/etcdlock, where they ran against the serve
// process): a server in process on TCP, reached through servetest's client
// (the requests and streams the CLI's tests share), its observe stream, and
// reads of the names' state in etcd.

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/lockjson"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/servetest"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// long bounds every wait for something that should happen soon, generous
// for a busy machine under -race.
const long = 30 * time.Second

// server is a running Server, with a client of its API (on addr) and one
// of its cluster.
type server struct {
	*servetest.Client
	addr string
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
	return &server{Client: servetest.TCP(t, addr), addr: addr, cli: cli}
}

// observe opens /v1/observe for name and returns its events' data.
func (s *server) observe(t *testing.T, name string) <-chan string {
	t.Helper()
	req, err := http.NewRequestWithContext(embedtest.Context(t, long), "GET", "http://"+s.addr+"/v1/observe?name="+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.HTTP.Do(req)
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

// keysOf returns the keys of name's holders and waiters.
func (s *server) keysOf(t *testing.T, name string) []string {
	t.Helper()
	st := locktest.Describe(t, s.cli, name)
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
