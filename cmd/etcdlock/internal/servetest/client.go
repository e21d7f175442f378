// Package servetest is the client side of etcdlock serve's HTTP API, one
// copy for the tests of the CLI (the serve process, on a unix socket or TCP)
// and of package serve (a server in process on TCP): requests, the streams
// of /v1/hold and /v1/campaign, and the reading of a token. Only tests use
// it, and it is internal, so none of it is public API.
package servetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

// long bounds every wait for something that should happen soon, generous
// for a busy machine under -race (the test packages' own long).
const long = 30 * time.Second

// Client is a client of one server's HTTP API: HTTP, which a test may
// wrap or use for requests of its own, and the base of the URLs it sends.
type Client struct {
	HTTP *http.Client
	base string // "http://" and the host
}

// Unix returns a client of the server on the unix socket sock (every
// request goes to it, whatever the URL's host); its idle connections are
// closed when t ends. It does not dial: a server not up fails the requests.
func Unix(t testing.TB, sock string) *Client {
	c := &Client{base: "http://etcdlock", HTTP: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}}
	t.Cleanup(c.HTTP.CloseIdleConnections)
	return c
}

// TCP returns a client of the server at addr (host:port); its idle
// connections are closed when t ends. It does not dial.
func TCP(t testing.TB, addr string) *Client {
	c := &Client{base: "http://" + addr, HTTP: &http.Client{Transport: &http.Transport{}}}
	t.Cleanup(c.HTTP.CloseIdleConnections)
	return c
}

// Do sends a request with a JSON body (none when body is nil) and returns
// the status and the decoded answer. A request that cannot be sent, and an
// answer that is not a JSON object, fail t.
func (c *Client) Do(t testing.TB, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(embedtest.Context(t, long), method, c.base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
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

// Hold opens a hold (POST /v1/hold with body) and returns its stream and
// its first line, "granted"; any other answer fails t.
func (c *Client) Hold(t testing.TB, body map[string]any) (*Stream, map[string]any) {
	t.Helper()
	st, code, first := c.Open(t, "/v1/hold", body)
	if code != http.StatusOK || first["event"] != "granted" {
		t.Fatalf("hold %v: %d %v", body, code, first)
	}
	return st, first
}

// TokenOf returns a line's token as a number; a line without a positive
// token fails t.
func TokenOf(t testing.TB, m map[string]any) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(fmt.Sprint(m["token"]), &n); err != nil || n <= 0 {
		t.Fatalf("token of %v: %v", m, err)
	}
	return n
}
