package etcdlock

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestKindCheckSeesWholeQueue: a refused joiner's key that is still in the
// queue (its removal failed) sits between a holder and the next joiner; the
// next joiner must see the holder's kind behind it, not only its neighbour.
func TestKindCheckSeesWholeQueue(t *testing.T) {
	for _, tc := range []struct {
		name       string
		holder     func(s *Session, name string) (*Lock, error)
		strayTag   string
		joinerSize int
	}{
		{"mutex holds, semaphore joins", func(s *Session, name string) (*Lock, error) {
			return NewMutex(s, name).Lock(testCtx(t, 10*time.Second))
		}, "s5", 5},
		{"semaphore of 1 holds, semaphore of 5 joins", func(s *Session, name string) (*Lock, error) {
			return NewSemaphore(s, name, 1).Acquire(testCtx(t, 10*time.Second))
		}, "s5", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := newClient(t, nil)
			holderS, strayS, joinerS := openSession(t, cli), openSession(t, cli), openSession(t, cli)
			name := uniqueName(t)
			ctx := testCtx(t, 30*time.Second)
			if _, err := tc.holder(holderS, name); err != nil {
				t.Fatal(err)
			}
			stray := waiterKey(namePrefix(name), tc.strayTag, strayS.Lease(), 7)
			if _, err := cli.Put(ctx, stray, strayS.value(slotKey{at: time.Now()}, time.Time{}), clientv3.WithLease(strayS.Lease())); err != nil {
				t.Fatal(err)
			}
			sem := NewSemaphore(joinerS, name, tc.joinerSize)
			if l, err := sem.Acquire(ctx); !errors.Is(err, ErrKindMismatch) {
				t.Fatalf("Acquire behind a stray key: %v, %v; want ErrKindMismatch", l, err)
			}
			if l, err := sem.TryAcquire(ctx); !errors.Is(err, ErrKindMismatch) {
				t.Fatalf("TryAcquire behind a stray key: %v, %v; want ErrKindMismatch", l, err)
			}
		})
	}
}

// TestCheckKind: every key read ahead counts, whatever its place.
func TestCheckKind(t *testing.T) {
	t.Parallel()
	dir := namePrefix("x")
	kv := func(tag string) *mvccpb.KeyValue { return &mvccpb.KeyValue{Key: []byte(dir + tag + "/1-0")} }
	for _, tc := range []struct {
		name  string
		tag   string
		ahead []*mvccpb.KeyValue
		ok    bool
	}{
		{"empty", "s5", nil, true},
		{"same size", "s5", []*mvccpb.KeyValue{kv("s5"), kv("s5")}, true},
		{"mutex behind a stray", "s5", []*mvccpb.KeyValue{kv("s5"), kv("m")}, false},
		{"other size far back", "s5", []*mvccpb.KeyValue{kv("s5"), kv("s5"), kv("s1")}, false},
		{"readers and writers", "r", []*mvccpb.KeyValue{kv("w"), kv("r")}, true},
		{"election behind a mutex", "e", []*mvccpb.KeyValue{kv("m")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := queue{dir: dir, tag: tc.tag}.checkKind(tc.ahead)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrKindMismatch)) {
				t.Fatalf("checkKind = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
