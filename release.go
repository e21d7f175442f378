package etcdlock

// This file holds the end of a grant: Unlock's and Resign's guarded delete.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdlock/etcdlock/internal/wire"
)

// releaseVerb names a release in errors: "resign" for a leadership, else
// "unlock".
func (q queue) releaseVerb() string {
	if q.verb == "campaign" {
		return "resign"
	}
	return "unlock"
}

// release ends a grant: it cancels the waiter's context with ErrReleased
// and deletes its key, guarded by its create revision, retrying failed
// deletes until ctx ends. final is false when the delete's outcome is still
// unknown then (the caller hands the key to the reaper).
//
// The guard is not optional: the key's name is reused by a later acquisition
// of the session once this one's slot is freed, and an attempt whose outcome
// was unknown can still be applied after that; guarded, it cannot delete the
// later key.
func (w *waiter) release(ctx context.Context) (err error, final bool) {
	q := w.q
	op := q.releaseVerb()
	if w.ctx.Err() != nil {
		// Lost before: the key is gone, or goes with the session's lease.
		w.free()
		return q.opError(op, fmt.Errorf("%w: %w", ErrNotHeld, context.Cause(w.ctx))), true
	}
	w.lose(ErrReleased)
	unknown := false // an earlier attempt may have deleted the key
	b := wire.NewBackoff(requestFloor, requestCeil)
	for {
		if err := ctx.Err(); err != nil {
			return q.opError(op, ctxErr(ctx, err)), false
		}
		deleted, err := w.deleteKey(ctx, unknown)
		switch wire.Classify(err) {
		case wire.Applied:
			w.free() // deleted now, or already gone
			if deleted || unknown {
				return nil, true
			}
			// The key was already gone: the grant was lost before this call.
			return q.opError(op, fmt.Errorf("%w: %w", ErrNotHeld, w.lossCause())), true
		case wire.LeaseGone:
			w.free()
			return q.opError(op, fmt.Errorf("%w: %w", ErrNotHeld, q.s.leaseLost())), true
		case wire.Refused:
			// Never succeeds (no permission to delete): the key goes with the lease.
			return q.opError(op, err), true
		}
		if serr := w.retryFutile(err); serr != nil {
			// No later attempt can succeed: the key goes with the lease.
			w.free()
			return q.opError(op, fmt.Errorf("%w: %w", ErrNotHeld, serr)), true
		}
		unknown = true
		q.s.log.Debug("unlock: delete failed, retrying", zap.String("key", w.key), zap.Error(err))
		if !b.WaitOr(ctx, q.s.Done(), q.s.cli.Ctx().Done()) {
			if serr := w.retryFutile(nil); serr != nil {
				w.free()
				return q.opError(op, fmt.Errorf("%w: %w", ErrNotHeld, serr)), true
			}
			return q.opError(op, ctxErr(ctx, ctx.Err())), false
		}
	}
}

// deleteKey sends one attempt of the waiter's guarded delete; deleted
// reports whether it found the key.
func (w *waiter) deleteKey(ctx context.Context, retry bool) (deleted bool, err error) {
	resp, err := w.q.s.book.commit(ctx, retry, wire.Txn{Dir: w.q.dir,
		Cmps:  []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.rev)},
		Thens: []clientv3.Op{clientv3.OpDelete(w.key)}})
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// lossCause tells why a released key was already gone: ErrSessionExpired
// when the lease is gone, else ErrLockLost.
func (w *waiter) lossCause() error {
	ctx, cancel := context.WithTimeout(context.Background(), lossLookup)
	defer cancel()
	if gone, _ := w.q.s.leaseGone(ctx); gone {
		return ErrSessionExpired
	}
	return ErrLockLost
}

// retryFutile returns the error that makes a release's retries pointless:
// the session's own (ErrSessionExpired or ErrSessionClosed) once it ended,
// and ErrSessionExpired once its client is closed (cli.Ctx done, or err is
// the client's "connection is closing" error) before the session noticed.
// It returns nil while retrying can still delete the key.
func (w *waiter) retryFutile(err error) error {
	s := w.q.s
	if serr := s.Err(); serr != nil {
		return serr
	}
	if s.cli.Ctx().Err() != nil ||
		(err != nil && status.Code(err) == codes.Canceled && strings.Contains(err.Error(), "the client connection is closing")) {
		return ErrSessionExpired
	}
	return nil
}

// reportEnd arranges for the end of w's grant (a release or a loss: its
// context's cause) to be logged through logAt and reported to the Observer,
// once, when w's context ends.
func (w *waiter) reportEnd(kind, mode string, logAt func(lvl zapcore.Level, msg string, more ...zap.Field)) {
	granted := time.Now()
	context.AfterFunc(w.ctx, func() {
		cause := context.Cause(w.ctx)
		held := time.Since(granted)
		switch {
		case errors.Is(cause, ErrReleased) && kind == kindElection:
			logAt(zap.InfoLevel, "leadership resigned", zap.Duration("held", held))
		case errors.Is(cause, ErrReleased):
			logAt(zap.DebugLevel, "released", zap.Duration("held", held))
		case kind == kindElection:
			logAt(zap.WarnLevel, "leadership lost", zap.Duration("held", held), zap.NamedError("cause", cause))
		default:
			logAt(zap.WarnLevel, "lock lost", zap.Duration("held", held), zap.NamedError("cause", cause))
		}
		w.q.s.observer().Released(ReleaseEvent{Kind: kind, Mode: mode, Name: w.q.name, Token: w.token(), Held: held, Cause: cause})
	})
}
