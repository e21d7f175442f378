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
