package main

// The serve contestants' HTTP client: one kept HTTP/1.1 connection used
// synchronously, a request written and its answer read on the caller's
// goroutine, as Python's http.client or Java's HttpURLConnection do. (Go's
// http.Transport adds a reader and a writer goroutine per connection and
// hands every request and answer between them; on the 2 cores that the
// bench, etcd and serve share, that client work is counted against serve.)

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// httpConn is a worker's connection to serve. It is not safe for
// concurrent use.
type httpConn struct {
	addr string // host:port
	c    net.Conn
	r    *bufio.Reader
	req  []byte // the request being written (reused)
}

func newHTTPConn(base string) *httpConn {
	return &httpConn{addr: base[len("http://"):]}
}

// do sends a request and returns its answer, headers read; the caller
// reads the body to its end (or calls drop) before the next request. ctx
// bounds the wait for the answer's headers: when it ends, the connection is
// dropped and ctx's error returned.
func (h *httpConn) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	if h.c == nil {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			return nil, err
		}
		h.c, h.r = c, bufio.NewReader(c)
	}
	h.req = fmt.Appendf(h.req[:0], "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, h.addr)
	if body != nil {
		h.req = fmt.Appendf(h.req, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	h.req = append(append(h.req, "\r\n"...), body...)
	c := h.c
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	_, err := c.Write(h.req)
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(h.r, nil)
	}
	if !stop() {
		h.drop()
		return nil, ctx.Err()
	}
	if err != nil {
		h.drop()
		return nil, err
	}
	return resp, nil
}

// call sends a request, reads its whole answer and returns its body; a
// status other than 200 is an error.
func (h *httpConn) call(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	resp, err := h.do(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.drop()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return b, nil
}

// drop closes the connection; the next request dials a new one.
func (h *httpConn) drop() {
	if h.c != nil {
		_ = h.c.Close()
		h.c, h.r = nil, nil
	}
}

// errStatus is an answer other than 200.
func errStatus(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	return errors.New(strconv.Itoa(resp.StatusCode) + " " + string(b))
}
