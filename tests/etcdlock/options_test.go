package etcdlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// ackCounter signals each acknowledged keepalive.
type ackCounter struct {
	etcdlock.NopObserver
	acks chan struct{}
}

func (o *ackCounter) KeepaliveAcked(time.Duration, time.Duration) {
	select {
	case o.acks <- struct{}{}:
	default:
	}
}

// TestWithRenewEvery: the session renews at the interval it is given (five
// acknowledgements of a 10 s lease well within one default interval of
// TTL/3), and a bad interval is refused before anything is granted.
func TestWithRenewEvery(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 30*time.Second)
	for _, tc := range []struct {
		what string
		opts []etcdlock.SessionOption
	}{
		{"zero", []etcdlock.SessionOption{etcdlock.WithRenewEvery(0)}},
		{"negative", []etcdlock.SessionOption{etcdlock.WithRenewEvery(-time.Second)}},
		{"over half the TTL", []etcdlock.SessionOption{etcdlock.WithTTL(10 * time.Second), etcdlock.WithRenewEvery(6 * time.Second)}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			if s, err := etcdlock.NewSession(ctx, cli, tc.opts...); !errors.Is(err, etcdlock.ErrInvalidArgument) {
				t.Fatalf("NewSession with a renewal interval %s: %v, %v; want ErrInvalidArgument", tc.what, s, err)
			}
		})
	}
	obs := &ackCounter{acks: make(chan struct{}, 1)}
	locktest.OpenSession(t, cli, etcdlock.WithTTL(10*time.Second), etcdlock.WithRenewEvery(100*time.Millisecond), etcdlock.WithObserver(obs))
	bound := time.After(3 * time.Second) // the default interval would be 3.3 s: one ack at most
	for i := 0; i < 5; i++ {
		select {
		case <-obs.acks:
		case <-bound:
			t.Fatalf("%d keepalives acknowledged in 3 s with a 100ms interval; want 5", i)
		}
	}
}
