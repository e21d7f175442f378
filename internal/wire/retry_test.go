package wire

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
		want Outcome
	}{
		{"answered", nil, Applied},
		{"lease not found", rpctypes.ErrLeaseNotFound, LeaseGone},
		{"lease not found, wrapped", fmt.Errorf("txn: %w", rpctypes.ErrLeaseNotFound), LeaseGone},
		{"permission denied", rpctypes.ErrPermissionDenied, Refused},
		{"invalid argument", status.Error(codes.InvalidArgument, "bad"), Refused},
		{"unauthenticated", status.Error(codes.Unauthenticated, "token"), Refused},
		{"deadline", context.DeadlineExceeded, Unknown},
		{"unavailable", status.Error(codes.Unavailable, "no leader"), Unknown},
		{"leader changed", rpctypes.ErrLeaderChanged, Unknown},
		{"timeout", rpctypes.ErrTimeout, Unknown},
		{"a refusal read in the answer", Refusal("moved"), Refused},
		{"a refusal, wrapped", fmt.Errorf("enqueue: %w", Refusal("moved")), Refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Fatalf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestBackoff: the pause doubles from the floor to the ceiling, with jitter
// in [d/2, d); Reset brings it back; a context that ended stops a wait.
func TestBackoff(t *testing.T) {
	t.Parallel()
	b := NewBackoff(10*time.Millisecond, 40*time.Millisecond)
	for _, want := range []time.Duration{10, 20, 40, 40} {
		if b.next != want*time.Millisecond {
			t.Fatalf("next pause %v, want %v", b.next, want*time.Millisecond)
		}
		b.next = min(2*b.next, b.ceil) // what Wait does, without the pause
	}
	b.Reset()
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
	if NewBackoff(time.Hour, time.Hour).Wait(ctx) {
		t.Fatal("wait on an ended context reported the pause elapsed")
	}
	stop := make(chan struct{})
	close(stop)
	if NewBackoff(time.Hour, time.Hour).WaitOr(context.Background(), nil, stop) {
		t.Fatal("waitOr with a closed stop channel reported the pause elapsed")
	}
	if !NewBackoff(time.Millisecond, time.Millisecond).Wait(context.Background()) {
		t.Fatal("wait did not report its pause elapsed")
	}
}
