package serve

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
)

// TestAttackServeSharedLeasesUnbounded: the session bounds exist because
// "a session is a lease in etcd" (limits.go), but a stream's shared
// session (one per TTL) is counted by none of them. One client with
// MaxClientSessions = MaxSessions = 1 and one stream at a time makes the
// server open a lease per TTL it names (1 s to 1 h: up to 3,600), each
// living SharedIdle (30 s) after its request: here 60 try-holds, one after
// the other, each answered at once, leave 60 leases.
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
		if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusTooManyRequests {
			t.Fatalf("try-hold %d: %s", i, resp.Status)
		}
	}
	resp, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(resp.Leases) - 1; got > 2 { // less the Go holder's
		t.Fatalf("one client bounded to 1 session and 1 stream made the server hold %d leases in etcd", got)
	}
}
