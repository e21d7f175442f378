package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// keysAhead builds the keys ahead of a waiter in queue "p", nearest first:
// one key per tag, of leases 1, 2, ...
func keysAhead(tags ...string) []*mvccpb.KeyValue {
	dir := namePrefix("p")
	kvs := make([]*mvccpb.KeyValue, len(tags))
	for i, tag := range tags {
		kvs[i] = &mvccpb.KeyValue{Key: []byte(waiterKey(dir, tag, 1+clientLease(i), 0)), CreateRevision: int64(100 - i)}
	}
	return kvs
}

func clientLease(i int) clientv3.LeaseID { return clientv3.LeaseID(i) }

// TestPolicies: each policy's decision and watch plan, from the keys ahead.
func TestPolicies(t *testing.T) {
	t.Parallel()
	ahead := func(tags ...string) []*mvccpb.KeyValue { return keysAhead(tags...) }
	key := func(kvs []*mvccpb.KeyValue, i int) string { return string(kvs[i].Key) }
	two := ahead(tagMutex, tagMutex)
	sem2 := ahead("s3", "s3")
	sem3 := ahead("s3", "s3", "s3")
	sem4 := ahead("s3", "s3", "s3", "s3")
	readers := ahead(tagReader, tagReader)
	writerBehindReaders := ahead(tagReader, tagWriter, tagReader)
	for _, tc := range []struct {
		name    string
		pol     policy
		ahead   []*mvccpb.KeyValue
		granted bool
		plan    watchPlan
	}{
		{"exclusive, alone", exclusive{}, nil, true, watchPlan{}},
		{"exclusive, behind two", exclusive{}, two, false, watchKey(key(two, 0))},
		{"counting 3, two ahead", counting{n: 3}, sem2, true, watchPlan{}},
		{"counting 3, front waiter", counting{n: 3}, sem3, false,
			watchPlan{set: map[string]bool{key(sem3, 0): true, key(sem3, 1): true, key(sem3, 2): true}}},
		{"counting 3, behind the front", counting{n: 3}, sem4, false, watchPlan{key: key(sem4, 0), puts: true}},
		{"reader, behind readers", readerPolicy{}, readers, true, watchPlan{}},
		{"reader, writer ahead", readerPolicy{}, writerBehindReaders, false, watchKey(key(writerBehindReaders, 1))},
		{"writer, behind readers", exclusive{}, readers, false, watchKey(key(readers, 0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			granted, plan := tc.pol.decide(tc.ahead)
			if granted != tc.granted || !plan.equal(tc.plan) {
				t.Fatalf("decide = %v, %+v; want %v, %+v", granted, plan, tc.granted, tc.plan)
			}
		})
	}
}

// TestWatchPlanMatters: which events can change a decision.
func TestWatchPlanMatters(t *testing.T) {
	t.Parallel()
	const del, put = mvccpb.DELETE, mvccpb.PUT
	set := watchPlan{set: map[string]bool{"a": true}}
	for _, tc := range []struct {
		name string
		plan watchPlan
		key  string
		typ  mvccpb.Event_EventType
		want bool
	}{
		{"key deleted", watchKey("a"), "a", del, true},
		{"key touched", watchKey("a"), "a", put, false},
		{"key touched, puts matter", watchPlan{key: "a", puts: true}, "a", put, true},
		{"another key", watchKey("a"), "b", del, false},
		{"set member deleted", set, "a", del, true},
		{"set member put", set, "a", put, false},
		{"not in set", set, "b", del, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.plan.matters(tc.key, tc.typ); got != tc.want {
				t.Fatalf("matters(%q, %v) = %v, want %v", tc.key, tc.typ, got, tc.want)
			}
		})
	}
}

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

// TestErrorMessage: an Error says "etcdlock:" once, names the operation and
// the name, and wraps its cause.
func TestErrorMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nested sentinels", newError("unlock", "billing/nightly", fmt.Errorf("%w: %w", ErrNotHeld, ErrLockLost)),
			`etcdlock: unlock "billing/nightly": not held: lock lost`},
		{"no name", newError("lock", "", ErrInvalidName), `etcdlock: lock: invalid name`},
		{"context", newError("lock", "x", context.DeadlineExceeded), `etcdlock: lock "x": context deadline exceeded`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Fatalf("Error() = %q, want %q", got, tc.want)
			}
			var e *Error
			if !errors.As(tc.err, &e) || e.Op == "" {
				t.Fatalf("errors.As(*Error) failed for %v", tc.err)
			}
		})
	}
	err := newError("unlock", "n", fmt.Errorf("%w: %w", ErrNotHeld, ErrLockLost))
	if !errors.Is(err, ErrNotHeld) || !errors.Is(err, ErrLockLost) {
		t.Fatalf("%v does not wrap its sentinels", err)
	}
}
