package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAttackServeLostSharedReplaced: the shared session of a TTL is lost
// (its lease revoked) while a hold uses it; the hold says lost; a new hold
// of that TTL right after gets a fresh session and keeps it after the old
// hold's stream ends (the old user's done must not idle-close or close the
// new session).
func TestAttackServeLostSharedReplaced(t *testing.T) {
	c, _, addr := startTestServer(t, Config{SharedIdle: 200 * time.Millisecond})
	cli := c.TestClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func(name string) (*http.Response, *bufio.Reader, map[string]string) {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(`{"name":"`+name+`","ttl":"3s"}`))
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(resp.Body)
		line, err := r.ReadString('\n')
		var g map[string]string
		if err != nil || json.Unmarshal([]byte(line), &g) != nil || g["event"] != "granted" {
			t.Fatalf("hold %s: %s %q %v", name, resp.Status, line, err)
		}
		return resp, r, g
	}
	a, ar, ag := open("lost/a")
	lease, _ := strconv.ParseInt(ag["lease"], 16, 64)
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := ar.ReadString('\n')
		if err != nil {
			t.Fatalf("a's stream ended without lost: %v", err)
		}
		if strings.Contains(line, `"lost"`) {
			break
		}
	}
	b, br, bg := open("lost/b")
	defer b.Body.Close()
	if bg["lease"] == ag["lease"] {
		t.Fatalf("b granted on the revoked lease %s", bg["lease"])
	}
	a.Body.Close()
	// b keeps its session past several idle periods.
	end := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) {
		line, err := br.ReadString('\n')
		if err != nil || !strings.Contains(line, `"alive"`) {
			t.Fatalf("b after a's end: %q %v", line, err)
		}
	}
	_, _, cg := open("lost/c")
	if cg["lease"] != bg["lease"] {
		t.Fatalf("c on lease %s, b on %s: want one shared session", cg["lease"], bg["lease"])
	}
}

// TestAttackServeHoldRightAfterLoss: a hold that arrives just after the
// TTL's shared lease is lost (before the session has noticed) is granted
// on a fresh session, or at least answered promptly.
func TestAttackServeHoldRightAfterLoss(t *testing.T) {
	c, _, addr := startTestServer(t, Config{})
	cli := c.TestClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bad := 0
	for i := range 10 {
		name := "soon/" + strconv.Itoa(i)
		resp, err := http.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(`{"name":"`+name+`a","ttl":"4s"}`))
		if err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		var g map[string]string
		_ = json.Unmarshal([]byte(line), &g)
		lease, _ := strconv.ParseInt(g["lease"], 16, 64)
		if _, err := cli.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		b, err := http.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(`{"name":"`+name+`b","ttl":"4s"}`))
		if err != nil {
			t.Fatal(err)
		}
		bl, _ := bufio.NewReader(b.Body).ReadString('\n')
		if b.StatusCode != http.StatusOK || !strings.Contains(bl, "granted") {
			bad++
			t.Logf("round %d: hold right after the loss: %s %q after %v", i, b.Status, strings.TrimSpace(bl), time.Since(start).Round(time.Millisecond))
		} else if bl2 := g["lease"]; strings.Contains(bl, `"lease":"`+bl2+`"`) {
			bad++
			t.Logf("round %d: granted on the revoked lease %s", i, bl2)
		}
		b.Body.Close()
		resp.Body.Close()
	}
	if bad > 0 {
		t.Fatalf("%d of 10 holds right after the shared lease was lost were not granted on a fresh session", bad)
	}
}
