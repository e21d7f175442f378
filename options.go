package etcdlock

// This file holds the options of NewSession.

import (
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
)

// sessionOptions is the configuration a SessionOption edits.
type sessionOptions struct {
	ttl        time.Duration
	identity   string
	logger     *zap.Logger
	pinning    bool
	noBatching bool
	renew      time.Duration // 0: TTL/3
	observer   Observer
	lockDelay  time.Duration
	tune       *tuning // nil: the session's own (a sharded session's sessions share its)
	err        error   // the first invalid option
}

func (o *sessionOptions) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// SessionOption configures NewSession. An invalid option makes NewSession
// return an error wrapping ErrInvalidArgument; no option is silently ignored.
type SessionOption func(*sessionOptions)

// WithTTL sets the lease TTL (default 10s). It is rounded up to whole seconds,
// etcd's unit. A TTL <= 0 or over 24h makes NewSession fail with
// ErrInvalidArgument. The server may grant a longer TTL (its minimum is about
// 1.5 election timeouts); Session.TTL reports what it granted.
func WithTTL(ttl time.Duration) SessionOption {
	return func(o *sessionOptions) {
		if ttl <= 0 || ttl > maxTTL {
			o.fail(fmt.Errorf("%w: TTL %v must be > 0 and <= %v", ErrInvalidArgument, ttl, maxTTL))
			return
		}
		o.ttl = ttl
	}
}

// WithIdentity sets the identity stored with every key of the session (shown
// by Describe and the CLI); default "hostname/pid". An empty identity makes
// NewSession fail with ErrInvalidArgument.
func WithIdentity(id string) SessionOption {
	return func(o *sessionOptions) {
		if id == "" {
			o.fail(fmt.Errorf("%w: empty identity", ErrInvalidArgument))
			return
		}
		o.identity = id
	}
}

// WithLogger sets the session's logger (default zap.NewNop()). A nil logger
// makes NewSession fail with ErrInvalidArgument.
func WithLogger(l *zap.Logger) SessionOption {
	return func(o *sessionOptions) {
		if l == nil {
			o.fail(fmt.Errorf("%w: nil logger", ErrInvalidArgument))
			return
		}
		o.logger = l
	}
}

// WithLeaderPinning chooses where keepalives go (default true): to the etcd
// leader's endpoint over one stream per client, shared by all of that
// client's sessions. Only the leader renews leases; a follower forwards every
// keepalive to it as a separate peer request, which loses leases under load
// (DESIGN.md, "Keepalives go to the leader"). While pinned, the queue's
// writes (enqueue, release), its waiters' predecessor watches and hand-off
// reads use that connection too, saving a follower's forwarding hop, unless
// cli.KV or cli.Watcher is wrapped (a namespace), which they must go
// through. With false, keepalives and every request use the client's
// balanced connection.
func WithLeaderPinning(on bool) SessionOption {
	return func(o *sessionOptions) { o.pinning = on }
}

func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// WithRenewEvery sets the time between the session's keepalives (default:
// a third of the TTL). A holder survives an outage of etcd (or of the path
// to it) shorter than TTL - interval - TTL/100 - 50ms before its validity
// clock runs out, so a shorter interval rides out longer outages, at the
// cost of more keepalives for the etcd leader to serve (one per interval
// per session). An interval <= 0 or over half the TTL makes NewSession fail
// with ErrInvalidArgument.
func WithRenewEvery(d time.Duration) SessionOption {
	return func(o *sessionOptions) {
		if d <= 0 {
			o.fail(fmt.Errorf("%w: renewal interval %v must be > 0", ErrInvalidArgument, d))
			return
		}
		o.renew = d
	}
}

// WithoutBatching sends each of the session's writes as a request of its
// own instead of through its client's group commit (DESIGN.md, "Group
// commit"), for debugging or measuring. The sessions of a client that
// choose differently use separate keepalive streams.
func WithoutBatching() SessionOption {
	return func(o *sessionOptions) { o.noBatching = true }
}

// maxLockDelay bounds WithLockDelay.
const maxLockDelay = time.Minute

// WithLockDelay sets the session's lock-delay (Chubby's): when the session
// is lost while holding (its lease ran out, or someone else revoked it), each
// of its grants passes to the next waiter only d after the waiter saw the
// key go. An explicit release (Unlock, Resign), Session.Close (which deletes
// its keys before it revokes) and Break pass at once. The delay is stored
// in each key's value, so every waiter honours it, in whatever process. It
// is for resources that cannot check a fencing token: it makes a paused
// holder's late writes less likely, never impossible, and no safety
// argument rests on it; check tokens (Fence, Lock.Guard) where you can. A
// client that comes after the key went, and finds nobody ahead, is granted
// at once. Default 0; d < 0 or d > 1 minute makes NewSession fail with
// ErrInvalidArgument.
func WithLockDelay(d time.Duration) SessionOption {
	return func(o *sessionOptions) {
		if d < 0 || d > maxLockDelay {
			o.fail(fmt.Errorf("%w: lock-delay %v must be >= 0 and <= %v", ErrInvalidArgument, d, maxLockDelay))
			return
		}
		o.lockDelay = d
	}
}
