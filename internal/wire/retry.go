package wire

// This file holds the one retry mechanism: a Backoff for the pause between
// attempts, and Classify, which names what a failed request tells about its
// write. Every retry loop is one switch on Classify's outcome and one
// Backoff.

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdlock/etcdlock/internal/etcdx"
)

// Backoff is the pause between attempts of a retry loop: jittered, doubling
// from floor up to ceil, back at floor after Reset. Build it with
// NewBackoff. It is not safe for concurrent use; each loop has its own.
type Backoff struct {
	floor, ceil time.Duration
	next        time.Duration // the pause before jitter
}

// NewBackoff returns a Backoff from floor up to ceil.
func NewBackoff(floor, ceil time.Duration) *Backoff {
	return &Backoff{floor: floor, ceil: ceil, next: floor}
}

// Wait pauses for the next delay, jittered, and doubles it. It returns false,
// early, when ctx ends.
func (b *Backoff) Wait(ctx context.Context) bool { return b.WaitOr(ctx, nil, nil) }

// WaitOr is Wait that also returns false, early, when stop1 or stop2 is
// closed (a nil channel never is).
func (b *Backoff) WaitOr(ctx context.Context, stop1, stop2 <-chan struct{}) bool {
	t := time.NewTimer(jitter(b.next))
	defer t.Stop()
	b.next = min(2*b.next, b.ceil)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-stop1:
	case <-stop2:
	}
	return false
}

// Reset makes the next pause the floor again, after progress.
func (b *Backoff) Reset() { b.next = b.floor }

// jitter returns a duration in [d/2, d).
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

// Outcome is what a request's error says about its write.
type Outcome int

const (
	// Applied: the request was answered (err == nil); what it did is in
	// its response.
	Applied Outcome = iota
	// LeaseGone: the session's lease no longer exists, and with it every
	// key of the session. Retrying cannot help; the session is over.
	LeaseGone
	// Refused: the request was refused for good and wrote nothing: the
	// user may not touch these keys (PermissionDenied), the request is
	// malformed or the credentials are wrong (InvalidArgument), or the auth
	// token could not be renewed (Unauthenticated; clientv3 already retried
	// with a fresh one); or the caller read a refusal in the answer
	// (Refusal).
	Refused
	// Unknown: the request may have been applied, now or at any later time
	// (DESIGN.md, "Writes of unknown outcome"); it may be retried.
	Unknown
)

// Classify returns the outcome of a request that returned err. It has no
// side effect: a caller that sees LeaseGone ends the session.
func Classify(err error) Outcome {
	switch {
	case err == nil:
		return Applied
	case etcdx.IsLeaseNotFound(err):
		return LeaseGone
	case permanent(err), errors.As(err, new(*refusal)):
		return Refused
	}
	return Unknown
}

// Refusal returns an error with text that Classify calls Refused: a
// refusal the caller read in an answer (a compare that failed for good),
// not one the server returned.
func Refusal(text string) error { return &refusal{text} }

type refusal struct{ text string }

func (e *refusal) Error() string { return e.text }

// permanent reports an error that retrying cannot fix (see Refused).
func permanent(err error) bool {
	switch codeOf(err) {
	case codes.PermissionDenied, codes.InvalidArgument, codes.Unauthenticated:
		return true
	}
	return false
}

// codeOf returns the gRPC code of err: of a gRPC status anywhere in its
// chain, or of clientv3's form of one (rpctypes.EtcdError).
func codeOf(err error) codes.Code {
	if ee := (rpctypes.EtcdError{}); errors.As(err, &ee) {
		return ee.Code()
	}
	return status.Code(err)
}
