package etcdlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/etcdlock/etcdlock"
)

// An error names the operation and the lock once, and wraps its sentinel.
func ExampleError() {
	_, err := etcdlock.NewMutex(nil, "billing/nightly").Lock(context.Background())
	fmt.Println(err)
	var e *etcdlock.Error
	if errors.As(err, &e) {
		fmt.Println(e.Op, e.Name, errors.Is(err, etcdlock.ErrInvalidArgument))
	}
	// Output:
	// etcdlock: lock "billing/nightly": invalid argument: nil session
	// lock billing/nightly true
}
