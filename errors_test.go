package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestErrorMessage: an Error says "etcdlock:" once, names the operation and
// the name, and wraps its cause.
func TestErrorMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nested sentinels", newError("unlock", "billing/nightly", fmt.Errorf("%w: %w", ErrNotHeld, ErrLockLost)),
			`etcdlock: unlock "billing/nightly": not held: lock lost`},
		{"no name", newError("lock", "", ErrInvalidName), `etcdlock: lock: invalid name`},
		{"context", newError("lock", "x", context.DeadlineExceeded), `etcdlock: lock "x": context deadline exceeded`},
		// A caller's error keeps its text, "etcdlock: " included: only the
		// package's own errors lose the prefix.
		{"caller's error after a sentinel", newError("run", "x", fmt.Errorf("%w: %w", ErrNotHeld, errors.New("proxy: etcdlock: busy"))),
			`etcdlock: run "x": not held: proxy: etcdlock: busy`},
		{"caller's wrapper around a sentinel", newError("lock", "x", fmt.Errorf("calling etcdlock: %w", ErrLocked)),
			`etcdlock: lock "x": calling etcdlock: locked`},
		{"caller's error before a sentinel", newError("lock", "x", fmt.Errorf("%w: %w", errors.New("etcdlock: locked by hand"), ErrLocked)),
			`etcdlock: lock "x": etcdlock: locked by hand: locked`},
		{"joined", newError("unlock", "x", errors.Join(ErrNotHeld, errors.New("etcdlock: mine"))),
			"etcdlock: unlock \"x\": not held\netcdlock: mine"},
		{"nested Error", newError("lockall", "", fmt.Errorf("%w: %w", newError("lock", "a", ErrLocked), errors.New("see etcdlock: docs"))),
			`etcdlock: lockall: lock "a": locked: see etcdlock: docs`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Fatalf("Error() = %q, want %q", got, tc.want)
			}
			var e *Error
			if !errors.As(tc.err, &e) || e.Op == "" {
				t.Fatalf("errors.As(*Error) failed for %v", tc.err)
			}
		})
	}
	err := newError("unlock", "n", fmt.Errorf("%w: %w", ErrNotHeld, ErrLockLost))
	if !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
		t.Fatalf("%v does not wrap its sentinels", err)
	}
}
