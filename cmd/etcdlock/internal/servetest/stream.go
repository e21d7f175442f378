package servetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// Stream is an open /v1/hold (or /v1/campaign) response: its lines, each
// a JSON object, as they come.
type Stream struct {
	resp   *http.Response
	lines  chan map[string]any
	cancel context.CancelFunc
}

// Open starts POST path with body and returns the stream once its status
// is in; first holds the first line when the status is 200 (on another
// status, the answer's first line, nil if none). A request that cannot be
// sent, and no first line of a 200 in time, fail t. The stream is closed
// when t ends.
func (c *Client) Open(t testing.TB, path string, body any) (st *Stream, status int, first map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "POST", c.base+path, bytes.NewReader(b))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	st = &Stream{resp: resp, lines: make(chan map[string]any, 100), cancel: cancel}
	t.Cleanup(st.Close)
	go func() {
		defer close(st.lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				st.lines <- m
			}
		}
	}()
	if resp.StatusCode != http.StatusOK {
		return st, resp.StatusCode, <-st.lines
	}
	select {
	case first = <-st.lines:
	case <-time.After(long):
		t.Fatalf("no first line of %s after %v", path, long)
	}
	return st, resp.StatusCode, first
}

// Close ends the request (the client going away); closing twice is
// harmless.
func (st *Stream) Close() {
	st.cancel()
	st.resp.Body.Close()
}

// Next returns the stream's next line with event ev, skipping the others,
// or nil if the stream ends first. A "lost" line on the way, and no line
// of ev in time, fail t.
func (st *Stream) Next(t testing.TB, ev string) map[string]any {
	t.Helper()
	deadline := time.After(long)
	for {
		select {
		case m, ok := <-st.lines:
			if !ok {
				return nil
			}
			if m["event"] == ev {
				return m
			}
			if m["event"] == "lost" {
				t.Fatalf("lost while waiting for a %q line: %v", ev, m)
			}
		case <-deadline:
			t.Fatalf("no %q line after %v", ev, long)
		}
	}
}

// Lines returns the stream's lines not yet read, as they come; the
// channel closes when the stream ends.
func (st *Stream) Lines() <-chan map[string]any {
	return st.lines
}
