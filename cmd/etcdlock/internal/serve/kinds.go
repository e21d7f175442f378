package serve

import (
	"context"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/acquire"
)

// checkKind checks a request's kind and semaphore size.
func checkKind(kind string, n int) error {
	switch kind {
	case "", "mutex", "read", "write":
		if n != 0 {
			return errorf(codeInvalidArgument, "n is a semaphore's size: not with kind %q", kind)
		}
		return nil
	case "semaphore":
		if n < 1 {
			return errorf(codeInvalidArgument, "a semaphore needs n >= 1, not %d", n)
		}
		return nil
	}
	return errorf(codeInvalidArgument, `unknown kind %q (want "mutex", "semaphore", "read" or "write")`, kind)
}

// take acquires name of kind on s (with try: only if free), as
// etcdlock run does.
func take(ctx context.Context, s acquire.Session, name, kind string, n int, try bool) (*etcdlock.Lock, error) {
	return acquire.Take(ctx, s, name, acquire.Kind{Name: kind, N: n}, try)
}
