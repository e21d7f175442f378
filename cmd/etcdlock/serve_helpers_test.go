//go:build unix

package main

// In cmd/etcdlock, not internal/serve: the helpers that run the serve
// process; servetest's client talks to it.

import (
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/servetest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// server is a running etcdlock serve, reached over its unix socket by
// servetest's client (or at its TCP address, addr).
type server struct {
	*servetest.Client
	p    *proc
	sock string
	addr string // host:port when it listens on TCP
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
	srv := &server{Client: servetest.Unix(t, sock), p: p, sock: sock}
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

// keysOf returns the keys of name's holders and waiters.
func keysOf(t *testing.T, name string) []string {
	t.Helper()
	st := locktest.Describe(t, cluster.TestClient(t), name)
	var keys []string
	for _, e := range append(st.Holders, st.Waiters...) {
		keys = append(keys, e.Key)
	}
	return keys
}
