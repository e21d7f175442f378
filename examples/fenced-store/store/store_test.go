package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/examples/fenced-store/store"
)

func ExampleStore() {
	st := store.New()
	fmt.Println(st.Put("report", []byte("by token 7"), 7))
	fmt.Println(st.Put("report", []byte("by token 9"), 9))
	// The holder of token 7 was paused past its lease and wakes up:
	err := st.Put("report", []byte("late, by token 7"), 7)
	fmt.Println(errors.Is(err, etcdlock.ErrStaleToken), err)
	v, tok, _ := st.Get("report")
	fmt.Printf("%s (token %d)\n", v, tok)
	// Output:
	// <nil>
	// <nil>
	// true store: put "report": etcdlock: stale token: token 7, highest admitted 9
	// by token 9 (token 9)
}

func ExampleClient_Put() {
	srv := httptest.NewServer(store.New()) // a real program runs it with http.ListenAndServe
	defer srv.Close()
	c := &store.Client{BaseURL: srv.URL}
	ctx := context.Background()

	// A lock holder sends its token with every write (l.Token() of an etcdlock.Lock).
	fmt.Println(c.Put(ctx, "billing/nightly", []byte("done"), 12))
	err := c.Put(ctx, "billing/nightly", []byte("late"), 10)
	fmt.Println(errors.Is(err, etcdlock.ErrStaleToken))
	v, tok, _ := c.Get(ctx, "billing/nightly")
	fmt.Println(string(v), tok)
	// Output:
	// <nil>
	// true
	// done 12
}

// TestConcurrentWritersNeverGoBack checks that the value a key ends with is
// the one of its highest token, whatever the interleaving of writers.
func TestConcurrentWritersNeverGoBack(t *testing.T) {
	st := store.New()
	var wg sync.WaitGroup
	for w := 1; w <= 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				tok := etcdlock.Token(i*8 + w)
				err := st.Put("k", []byte(tok.String()), tok)
				if err != nil && !errors.Is(err, etcdlock.ErrStaleToken) {
					t.Error(err)
				}
				if v, got, _ := st.Get("k"); string(v) != got.String() || got < tok && err == nil {
					t.Errorf("after admitting %d: value %q with token %d", tok, v, got)
				}
			}
		}()
	}
	wg.Wait()
	if v, tok, _ := st.Get("k"); tok != st.Highest("k") || string(v) != tok.String() {
		t.Fatalf("value %q, token %d, highest %d", v, tok, st.Highest("k"))
	}
}
