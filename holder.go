package etcdlock

import (
	"context"
	"fmt"
	"strings"
)

// holderKey is the context key of WithHolderIdentity.
type holderKey struct{}

// maxIdentity bounds an identity's bytes: it is stored with every key.
const maxIdentity = 256

// WithHolderIdentity returns a child of ctx with which an acquisition
// (Lock, TryLock, LockAll, Acquire, RLock, Campaign, ...) stores id as its
// key's identity instead of its session's, so that many holders that share
// one session (one lease), such as the clients of a lock server, each show
// as themselves in Describe, List and the CLI. It returns an error wrapping
// ErrInvalidArgument for an empty id, one of only spaces, or one over 256
// bytes.
func WithHolderIdentity(ctx context.Context, id string) (context.Context, error) {
	if strings.TrimSpace(id) == "" || len(id) > maxIdentity {
		return nil, fmt.Errorf("%w: holder identity %q must be 1 to %d bytes, not blank", ErrInvalidArgument, id, maxIdentity)
	}
	return context.WithValue(ctx, holderKey{}, id), nil
}

// holderOf returns the identity WithHolderIdentity put in ctx, "" if none.
func holderOf(ctx context.Context) string {
	id, _ := ctx.Value(holderKey{}).(string)
	return id
}
