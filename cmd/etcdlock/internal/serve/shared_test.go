package serve

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSharedLeaseClosedWhenIdle: the shared session (lease) of a TTL lives
// while a hold uses it, however long, and is closed once no request has
// used it for SharedIdle, so a client trying many TTLs leaves no lease
// behind.
func TestSharedLeaseClosedWhenIdle(t *testing.T) {
	const idle = 300 * time.Millisecond
	c, _, addr := startTestServer(t, Config{SharedIdle: idle})
	cli := c.TestClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leases := func() int {
		t.Helper()
		resp, err := cli.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Leases)
	}
	resp, err := http.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(`{"name":"idle/a","ttl":"7s"}`))
	if err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(resp.Body)
	if line, err := lines.ReadString('\n'); err != nil || !strings.Contains(line, `"granted"`) {
		t.Fatalf("hold: %s %q %v", resp.Status, line, err)
	}
	// Held for several idle periods (a window in which nothing may
	// happen): the lease stays, the stream says alive.
	window := time.After(4 * idle)
	for done := false; !done; {
		select {
		case <-window:
			done = true
		default:
			if line, err := lines.ReadString('\n'); err != nil || !strings.Contains(line, `"alive"`) {
				t.Fatalf("while held: %q %v", line, err)
			}
		}
	}
	if n := leases(); n != 1 {
		t.Fatalf("%d leases while a hold uses its TTL's; want 1", n)
	}
	resp.Body.Close() // releases; the TTL's session is idle from then on
	deadline := time.Now().Add(20 * time.Second)
	for leases() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the idle TTL's lease is still there %v after its last hold ended", 20*time.Second)
		}
		time.Sleep(50 * time.Millisecond) // polling etcd: a revoke has no event to wait for
	}
}
