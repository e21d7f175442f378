package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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

// TestSharedLeasesPerTTL: holds of one TTL one after another use one
// lease; sixteen held at once spread over more (each takes the least used
// session, a new one opens past sharedFill), never past sharedPerTTL.
func TestSharedLeasesPerTTL(t *testing.T) {
	c, _, addr := startTestServer(t, Config{})
	cli := c.TestClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	hold := func(name string) (lease string, release func()) {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(`{"name":"`+name+`","ttl":"9s"}`))
		if err != nil {
			t.Fatal(err)
		}
		var first struct{ Event, Lease string }
		line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
		if err != nil || json.Unmarshal(line, &first) != nil || first.Event != "granted" {
			t.Fatalf("hold %s: %s %q %v", name, resp.Status, line, err)
		}
		return first.Lease, func() { resp.Body.Close() }
	}
	one, release := hold("pool/0")
	release()
	if again, release := hold("pool/0"); again != one {
		t.Fatalf("a hold after the last one ended is on lease %s, the last on %s: want one lease", again, one)
	} else {
		release()
	}
	leases := map[string]int{}
	for i := range 16 {
		lease, release := hold(fmt.Sprintf("pool/%d", i+1))
		defer release()
		leases[lease]++
	}
	if len(leases) < 2 || len(leases) > sharedPerTTL {
		t.Fatalf("16 holds at once on %d leases (%v); want 2 to %d", len(leases), leases, sharedPerTTL)
	}
	resp, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.Leases); n > sharedPerTTL {
		t.Fatalf("%d leases in etcd for one TTL; want at most %d", n, sharedPerTTL)
	}
}
