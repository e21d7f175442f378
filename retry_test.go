package etcdlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestClassify: what each kind of error says about a write.
func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want outcome
	}{
		{"answered", nil, applied},
		{"lease not found", rpctypes.ErrLeaseNotFound, leaseGone},
		{"lease not found, wrapped", fmt.Errorf("txn: %w", rpctypes.ErrLeaseNotFound), leaseGone},
		{"permission denied", rpctypes.ErrPermissionDenied, refused},
		{"invalid argument", status.Error(codes.InvalidArgument, "bad"), refused},
		{"unauthenticated", status.Error(codes.Unauthenticated, "token"), refused},
		{"deadline", context.DeadlineExceeded, unknown},
		{"unavailable", status.Error(codes.Unavailable, "no leader"), unknown},
		{"leader changed", rpctypes.ErrLeaderChanged, unknown},
		{"timeout", rpctypes.ErrTimeout, unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.want {
				t.Fatalf("classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestBackoff: the pause doubles from the floor to the ceiling, with jitter
// in [d/2, d); reset brings it back; a context that ended stops a wait.
func TestBackoff(t *testing.T) {
	t.Parallel()
	b := newBackoff(10*time.Millisecond, 40*time.Millisecond)
	for _, want := range []time.Duration{10, 20, 40, 40} {
		if b.next != want*time.Millisecond {
			t.Fatalf("next pause %v, want %v", b.next, want*time.Millisecond)
		}
		b.next = min(2*b.next, b.ceil) // what wait does, without the pause
	}
	b.reset()
	if b.next != b.floor {
		t.Fatalf("after reset: %v, want the floor", b.next)
	}
	for range 100 {
		if d := jitter(time.Second); d < time.Second/2 || d >= time.Second {
			t.Fatalf("jitter(1s) = %v", d)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if newBackoff(time.Hour, time.Hour).wait(ctx) {
		t.Fatal("wait on an ended context reported the pause elapsed")
	}
	stop := make(chan struct{})
	close(stop)
	if newBackoff(time.Hour, time.Hour).waitOr(context.Background(), nil, stop) {
		t.Fatal("waitOr with a closed stop channel reported the pause elapsed")
	}
	if !newBackoff(time.Millisecond, time.Millisecond).wait(context.Background()) {
		t.Fatal("wait did not report its pause elapsed")
	}
}
