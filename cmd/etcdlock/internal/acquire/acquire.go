// Package acquire takes one grant of a name by kind, for the commands that
// offer every kind: etcdlock run (its flags) and etcdlock serve (its "kind"
// field).
package acquire

import (
	"context"

	"github.com/etcdlock/etcdlock"
)

// Kind is what to take: Mutex (the default), a grant of a semaphore of N
// (Semaphore), or the shared (Read) or exclusive (Write) side of a
// read-write lock.
type Kind struct {
	Name string // "mutex" or "", "semaphore", "read", "write"
	N    int    // a semaphore's size
}

// Take waits for the grant of name of kind k on s, or with try takes it
// only if free (the library's Try form). An unknown kind takes a mutex:
// callers check kinds first.
func Take(ctx context.Context, s Session, name string, k Kind, try bool) (*etcdlock.Lock, error) {
	switch {
	case k.Name == "semaphore" && try:
		return s.NewSemaphore(name, k.N).TryAcquire(ctx)
	case k.Name == "semaphore":
		return s.NewSemaphore(name, k.N).Acquire(ctx)
	case k.Name == "read" && try:
		return s.NewRWMutex(name).TryRLock(ctx)
	case k.Name == "read":
		return s.NewRWMutex(name).RLock(ctx)
	case k.Name == "write" && try:
		return s.NewRWMutex(name).TryLock(ctx)
	case k.Name == "write":
		return s.NewRWMutex(name).Lock(ctx)
	case try:
		return s.NewMutex(name).TryLock(ctx)
	}
	return s.NewMutex(name).Lock(ctx)
}
