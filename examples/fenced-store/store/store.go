// Package store is a small fenced key-value store: the resource side of
// etcdlock's fencing. Every write carries the fencing token of the lock its
// writer holds, and the store refuses a write whose token is lower than the
// highest it has admitted for that key, so a holder that was paused past its
// lease (and lost the lock to a newer holder meanwhile) cannot overwrite the
// newer holder's data when it wakes up.
//
// Store serves it over HTTP (PUT and GET /{key}, the token in the
// Fencing-Token header, etcdlock.TokenHeader); Client is the writer's side.
// The check and the write happen under one mutex: a fence is only as good as
// the atomicity of "check the token, then write". A SQL table gets the same
// effect from a single conditional UPDATE (see docs/guarantees.md,
// "Checking tokens at the resource").
package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/etcdlock/etcdlock"
)

// MaxValueSize is the largest value Store accepts in one PUT (1 MiB).
const MaxValueSize = 1 << 20

// Store is an in-memory fenced key-value store. Each key is its own
// resource with its own etcdlock.Fence: a write to a key is admitted only if
// its token is at least the highest token admitted for that key so far. The
// zero value is not ready: use New. A Store is safe for concurrent use and is
// an http.Handler.
type Store struct {
	mu    sync.Mutex
	items map[string]*item
}

type item struct {
	fence etcdlock.Fence
	value []byte
	token etcdlock.Token // the token of the write that set value
}

// New returns an empty Store.
func New() *Store { return &Store{items: make(map[string]*item)} }

// Put writes value under key if tok passes the key's fence. It returns an
// error wrapping etcdlock.ErrStaleToken, and changes nothing, when tok is
// lower than the highest token admitted for key, or not positive.
func (s *Store) Put(key string, value []byte, tok etcdlock.Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[key]
	if it == nil {
		it = &item{}
	}
	// Check and write under one lock: a write admitted here can never be
	// overtaken by an older one between the check and the write.
	if err := it.fence.Admit(tok); err != nil {
		return fmt.Errorf("store: put %q: %w", key, err)
	}
	s.items[key] = it
	it.value = bytes.Clone(value)
	it.token = tok
	return nil
}

// Get returns the value stored under key and the token of the write that
// stored it; ok is false when the key was never written.
func (s *Store) Get(key string) (value []byte, tok etcdlock.Token, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.items[key]
	if it == nil {
		return nil, 0, false
	}
	return bytes.Clone(it.value), it.token, true
}

// Highest returns the highest token admitted for key, 0 if none.
func (s *Store) Highest(key string) etcdlock.Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	if it := s.items[key]; it != nil {
		return it.fence.Highest()
	}
	return 0
}

// ServeHTTP serves the store. The key is the URL path without its leading
// "/", and must not be empty.
//
//   - PUT /{key} with the header Fencing-Token: N and the value as body
//     writes it if N passes the key's fence: 204 No Content. A stale token
//     gets 409 Conflict with the error as body and the key's highest token in
//     the Fencing-Token header; a missing or malformed token gets 400.
//   - GET /{key} returns the value (200) with the token of the write that
//     stored it in the Fencing-Token header, or 404.
func (s *Store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, "/")
	if key == "" {
		http.Error(w, "store: missing key in the path", http.StatusBadRequest)
		return
	}
	switch r.Method {
	case http.MethodPut:
		h := r.Header.Get(etcdlock.TokenHeader)
		if h == "" {
			http.Error(w, "store: missing "+etcdlock.TokenHeader+" header", http.StatusBadRequest)
			return
		}
		tok, err := etcdlock.ParseToken(h)
		if err != nil {
			http.Error(w, "store: "+err.Error(), http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxValueSize))
		if err != nil {
			http.Error(w, "store: read body: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		if err := s.Put(key, body, tok); err != nil {
			if errors.Is(err, etcdlock.ErrStaleToken) {
				w.Header().Set(etcdlock.TokenHeader, s.Highest(key).String())
				http.Error(w, err.Error(), http.StatusConflict)
				return
			}
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet, http.MethodHead:
		value, tok, ok := s.Get(key)
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set(etcdlock.TokenHeader, tok.String())
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(value)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		http.Error(w, "store: method not allowed", http.StatusMethodNotAllowed)
	}
}

// Client writes to and reads from a Store served over HTTP.
type Client struct {
	// BaseURL is the store's URL, such as "http://127.0.0.1:8080".
	BaseURL string
	// HTTP is the client used for requests; nil means http.DefaultClient.
	HTTP *http.Client
}

// Put writes value under key with the fencing token tok. It returns nil when
// the store admitted the write, an error wrapping etcdlock.ErrStaleToken when
// the store refused it as stale (409), and another error otherwise.
func (c *Client) Put(ctx context.Context, key string, value []byte, tok etcdlock.Token) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.url(key), bytes.NewReader(value))
	if err != nil {
		return fmt.Errorf("store: put %q: %w", key, err)
	}
	req.Header.Set(etcdlock.TokenHeader, tok.String())
	resp, err := c.client().Do(req)
	if err != nil {
		return fmt.Errorf("store: put %q: %w", key, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch resp.StatusCode {
	case http.StatusNoContent, http.StatusOK:
		return nil
	case http.StatusConflict:
		return fmt.Errorf("store: put %q with token %d: %w (%s: %s)", key, tok,
			etcdlock.ErrStaleToken, resp.Status, strings.TrimSpace(string(msg)))
	default:
		return fmt.Errorf("store: put %q: %s: %s", key, resp.Status, strings.TrimSpace(string(msg)))
	}
}

// Get reads the value stored under key and the token of the write that
// stored it. It returns an error wrapping ErrNotFound when the key was never
// written.
func (c *Client) Get(ctx context.Context, key string) (value []byte, tok etcdlock.Token, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(key), nil)
	if err != nil {
		return nil, 0, fmt.Errorf("store: get %q: %w", key, err)
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("store: get %q: %w", key, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxValueSize+1))
	if err != nil {
		return nil, 0, fmt.Errorf("store: get %q: %w", key, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, 0, fmt.Errorf("store: get %q: %w", key, ErrNotFound)
	default:
		return nil, 0, fmt.Errorf("store: get %q: %s: %s", key, resp.Status, strings.TrimSpace(string(body)))
	}
	tok, err = etcdlock.ParseToken(resp.Header.Get(etcdlock.TokenHeader))
	if err != nil {
		return nil, 0, fmt.Errorf("store: get %q: %w", key, err)
	}
	return body, tok, nil
}

// ErrNotFound is returned by Client.Get for a key that was never written.
var ErrNotFound = errors.New("store: not found")

func (c *Client) url(key string) string {
	return strings.TrimSuffix(c.BaseURL, "/") + "/" + (&url.URL{Path: key}).EscapedPath()
}

func (c *Client) client() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}
