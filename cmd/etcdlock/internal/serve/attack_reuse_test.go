package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

// TestAttackServeReuseAfterLostStream: a stream that ends server-side (its
// key deleted: "lost") completes its response, so the client reuses the
// connection; the ttl-bounded write deadline, TCP_USER_TIMEOUT and
// keepalive must not break the next requests on it, made after more than
// the ttl.
func TestAttackServeReuseAfterLostStream(t *testing.T) {
	t.Parallel() // its own cluster; mostly waits
	c, _, addr := startTestServer(t, Config{})
	cli := c.TestClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var conns []net.Conn
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conns = append(conns, i.Conn) }}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	do := func(method, path, body string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, "http://"+addr+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		return hc.Do(req)
	}
	resp, err := do("POST", "/v1/hold", `{"name":"reuse/a","ttl":"1s"}`)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	line, _ := r.ReadString('\n')
	var g map[string]string
	if json.Unmarshal([]byte(line), &g) != nil || g["event"] != "granted" {
		t.Fatalf("hold: %q", line)
	}
	if _, err := cli.Delete(ctx, g["key"]); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(line, `"lost"`) {
		if line, err = r.ReadString('\n'); err != nil {
			t.Fatalf("no lost line: %v", err)
		}
	}
	_, _ = io.Copy(io.Discard, r)
	resp.Body.Close()
	time.Sleep(2500 * time.Millisecond) // past the ttl and the keepalive idle
	for i := range 3 {
		resp, err := do("GET", "/v1/state?name=reuse/a", "")
		if err != nil {
			t.Fatalf("request %d on the reused connection: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %s", i, resp.Status)
		}
		time.Sleep(1500 * time.Millisecond)
	}
	if len(conns) < 2 || conns[1] != conns[0] {
		t.Logf("the connection was not reused (%d conns): the check is moot", len(conns))
	}
}
