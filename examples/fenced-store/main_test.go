package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/examples/fenced-store/store"
)

// put sends a raw PUT and returns the status, the body and the token header.
func put(t *testing.T, base, key, token, value string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, base+"/"+key, strings.NewReader(value))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set(etcdlock.TokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header.Get(etcdlock.TokenHeader)
}

func TestStoreAdmitsAndRejects(t *testing.T) {
	srv := httptest.NewServer(newHandler(nil)) // on 127.0.0.1:0
	defer srv.Close()

	steps := []struct {
		key, token, value string
		status            int
	}{
		{"billing/nightly", "7", "run by token 7", http.StatusNoContent},
		{"billing/nightly", "7", "again by token 7", http.StatusNoContent}, // the holder writes twice
		{"billing/nightly", "9", "run by token 9", http.StatusNoContent},   // the next holder
		{"billing/nightly", "7", "late write by token 7", http.StatusConflict},
		{"other", "3", "another key has its own fence", http.StatusNoContent},
		{"billing/nightly", "", "no token", http.StatusBadRequest},
		{"billing/nightly", "0", "zero token", http.StatusBadRequest},
		{"billing/nightly", "x", "bad token", http.StatusBadRequest},
		{"", "10", "no key", http.StatusBadRequest},
	}
	for _, s := range steps {
		status, body, hdr := put(t, srv.URL, s.key, s.token, s.value)
		if status != s.status {
			t.Fatalf("PUT /%s token %q: status %d (%s), want %d", s.key, s.token, status, body, s.status)
		}
		if status == http.StatusConflict {
			if !strings.Contains(body, "stale token") || hdr != "9" {
				t.Fatalf("409 body %q, %s %q; want a stale-token error and the highest token 9", body, etcdlock.TokenHeader, hdr)
			}
		}
	}

	c := &store.Client{BaseURL: srv.URL}
	ctx := t.Context()
	v, tok, err := c.Get(ctx, "billing/nightly")
	if err != nil || string(v) != "run by token 9" || tok != 9 {
		t.Fatalf("Get = %q, %d, %v; want the write of token 9", v, tok, err)
	}
	if err := c.Put(ctx, "billing/nightly", []byte("late"), 8); !errors.Is(err, etcdlock.ErrStaleToken) {
		t.Fatalf("Client.Put with token 8 after 9: %v, want ErrStaleToken", err)
	}
	if err := c.Put(ctx, "billing/nightly", []byte("next"), 12); err != nil {
		t.Fatalf("Client.Put with token 12: %v", err)
	}
	if _, _, err := c.Get(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
}

func TestServeStops(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, "127.0.0.1:0") }()
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("serve after cancel: %v", err)
	}
}
