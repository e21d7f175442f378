package etcdlock

import (
	"context"
	"errors"
	"testing"

	"github.com/etcdlock/etcdlock/internal/layout"
)

func TestTokenGeneration(t *testing.T) {
	for _, tc := range []struct{ gen, rev int64 }{{0, 1}, {0, maxRevision}, {1, 1}, {3, 12345}, {layout.MaxGeneration, maxRevision}} {
		tok := tokenOf(tc.gen, tc.rev)
		if tok.Generation() != tc.gen || tok.Revision() != tc.rev || tok <= 0 {
			t.Fatalf("tokenOf(%d, %d) = %d: generation %d, revision %d", tc.gen, tc.rev, tok, tok.Generation(), tok.Revision())
		}
	}
	// Any token of a higher generation is above every token of a lower one.
	if tokenOf(2, 1) <= tokenOf(1, maxRevision) {
		t.Fatal("a token of generation 2 is not above generation 1's highest")
	}
	// Tokens of one cluster that is not sharded are its revisions.
	if tokenOf(0, 42) != 42 {
		t.Fatal("generation 0 changes the token")
	}
}

func TestTokenSpace(t *testing.T) {
	for _, tc := range []struct {
		gen, rev int64
		ok       bool
	}{{0, maxRevision + 1, true}, {1, maxRevision, true}, {1, maxRevision + 1, false}} {
		err := checkTokenSpace(tc.gen, tc.rev)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrTokenOverflow)) {
			t.Fatalf("checkTokenSpace(%d, %d) = %v", tc.gen, tc.rev, err)
		}
	}
}

// TestGrantableRefusesOverflow: no grant of a sharded key whose revision
// would spill into the generation's bits (queue.grant and LockAll both ask
// grantable); a generation-0 key of any revision is granted.
func TestGrantableRefusesOverflow(t *testing.T) {
	s := &Session{router: &routing{}} // live: a routed session ends only by Close
	for _, tc := range []struct {
		gen, rev int64
		want     error
	}{{1, maxRevision, nil}, {1, maxRevision + 1, ErrTokenOverflow}, {0, maxRevision + 1, nil}} {
		w := &waiter{sk: slotKey{gen: tc.gen}, rev: tc.rev}
		if err := s.grantable(context.Background(), w); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Fatalf("grantable(gen %d, rev %d) = %v, want %v", tc.gen, tc.rev, err, tc.want)
		}
	}
}
