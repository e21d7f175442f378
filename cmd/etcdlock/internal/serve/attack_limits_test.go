package serve

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
)

// TestAttackServeSharedLeasesUnbounded: a stream's shared session (one per
// TTL, a lease each) is counted by no session bound; a client naming TTL
// after TTL (here 60, one try-hold each, one after the other) must not make
// the server hold a lease per TTL: past maxSharedTTLs a new TTL is refused
// too_many, and the leases stay within the bound.
func TestAttackServeSharedLeasesUnbounded(t *testing.T) {
	c, _, addr := startTestServer(t, Config{MaxClientSessions: 1, MaxSessions: 1, MaxClientStreams: 1, MaxStreams: 1})
	cli := c.TestClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := etcdlock.NewSession(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := etcdlock.NewMutex(s, "attack/busy").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 60
	for i := 1; i <= n; i++ {
		resp, err := http.Post("http://"+addr+"/v1/hold", "application/json",
			strings.NewReader(fmt.Sprintf(`{"name":"attack/busy","try":true,"ttl":"%ds"}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		want := http.StatusConflict // locked: the Go holder has it
		if i > maxSharedTTLs {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("try-hold %d: %s, want %d", i, resp.Status, want)
		}
	}
	resp, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(resp.Leases) - 1; got > maxSharedTTLs { // less the Go holder's
		t.Fatalf("one client naming %d ttls made the server hold %d leases in etcd; want at most %d", n, got, maxSharedTTLs)
	}
}

// TestAttackServeLoopbackSourceBypass: a client is its remote IP, and a
// unix socket's clients are one ("they share a machine"); but over TCP on
// loopback every 127.0.0.0/8 source address is a client of its own: one
// local process binds 127.0.0.2, .3, ... and opens MaxClientSessions (here
// 1) sessions from each, up to the total bound.
func TestAttackServeLoopbackSourceBypass(t *testing.T) {
	addr := sharedServer(t, Config{MaxClientSessions: 1})
	opened := 0
	for i := 2; i <= 6; i++ {
		src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(i))}
		c := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: src}).DialContext}}
		resp, err := c.Post("http://"+addr+"/v1/sessions", "application/json", strings.NewReader(`{"ttl":"1h"}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			opened++
		}
	}
	if opened > 1 {
		t.Fatalf("one local process (MaxClientSessions 1) opened %d sessions from %d loopback source addresses", opened, 5)
	}
}
