package serve

import (
	"context"

	"github.com/etcdlock/etcdlock"
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
func take(ctx context.Context, s *etcdlock.Session, name, kind string, n int, try bool) (*etcdlock.Lock, error) {
	switch {
	case kind == "semaphore" && try:
		return etcdlock.NewSemaphore(s, name, n).TryAcquire(ctx)
	case kind == "semaphore":
		return etcdlock.NewSemaphore(s, name, n).Acquire(ctx)
	case kind == "read" && try:
		return etcdlock.NewRWMutex(s, name).TryRLock(ctx)
	case kind == "read":
		return etcdlock.NewRWMutex(s, name).RLock(ctx)
	case kind == "write" && try:
		return etcdlock.NewRWMutex(s, name).TryLock(ctx)
	case kind == "write":
		return etcdlock.NewRWMutex(s, name).Lock(ctx)
	case try:
		return etcdlock.NewMutex(s, name).TryLock(ctx)
	}
	return etcdlock.NewMutex(s, name).Lock(ctx)
}
