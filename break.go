package etcdlock

// This file holds Break: an operator's removal of one grant.

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/wire"
)

// Break deletes exactly the grant of name whose token is token: the
// holder's key, guarded by its create revision (the token), so that a later
// grant, even one under a reused key name, is never touched. The holder's
// lease is left alone, so its other locks stay held; its Lock.Context ends
// with ErrLockLost once it sees the deletion, and until then it may still
// act, which only fencing at the resource guards against. The next waiter
// is granted as after an Unlock. The same transaction writes the name's
// break marker (see Broken), so a watcher sees the deletion as a break.
//
// Break returns nil once that key is deleted. It returns an error wrapping
// ErrNotHeld when no current holder of name has that token (it released,
// was broken, or is a waiter, not a holder), ErrInvalidArgument for a nil
// client or a token below 1, ErrInvalidName for a bad name, and the read's
// or the delete's error (wrapping ctx's) otherwise; then nothing was
// deleted, except after a delete of unknown outcome, which deletes at most
// that grant. Break is safe for concurrent use.
func Break(ctx context.Context, cli *clientv3.Client, name string, token Token) error {
	switch {
	case cli == nil:
		return newError("break", name, fmt.Errorf("%w: nil client", ErrInvalidArgument))
	case token < 1:
		return newError("break", name, fmt.Errorf("%w: token %d (tokens are 1 or more)", ErrInvalidArgument, token))
	}
	st, err := Describe(ctx, cli, name)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Op = "break"
		}
		return err
	}
	var key string
	var lease clientv3.LeaseID
	for _, h := range st.Holders {
		if h.Token == token {
			key, lease = h.Key, h.Lease
		}
	}
	if key == "" {
		return newError("break", name, fmt.Errorf("%w: no holder has token %d", ErrNotHeld, token))
	}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", token.Revision())). // a sharded token carries its generation above
		Then(clientv3.OpDelete(key), layout.BrokenOp(key, int64(token), lease)).
		Commit()
	switch {
	case wire.Classify(err) == wire.LeaseGone:
		// The holder's lease, and with it the key, went meanwhile.
		return newError("break", name, fmt.Errorf("%w: the grant of token %d ended meanwhile", ErrNotHeld, token))
	case err != nil:
		return newError("break", name, ctxErr(ctx, err))
	}
	if !resp.Succeeded {
		return newError("break", name, fmt.Errorf("%w: the grant of token %d ended meanwhile", ErrNotHeld, token))
	}
	return nil
}
