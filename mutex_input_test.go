package etcdlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestBadInput(t *testing.T) {
	cli := newClient(t, nil)
	s := openSession(t, cli)
	ctx := testCtx(t, 30*time.Second)
	long := strings.Repeat("x", 1025)
	for _, tc := range []struct {
		name string
		m    *Mutex
		want error
	}{
		{"empty name", NewMutex(s, ""), ErrInvalidName},
		{"long name", NewMutex(s, long), ErrInvalidName},
		{"invalid utf-8", NewMutex(s, "a\xffb"), ErrInvalidName},
		{"nil session", NewMutex(nil, "x"), ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.m.Lock(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("Lock: %v, want %v", err, tc.want)
			}
			if _, err := tc.m.TryLock(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("TryLock: %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := NewMutex(s, strings.Repeat("é", 512)).TryLock(ctx); err != nil {
		t.Fatalf("a 1024-byte name: %v", err)
	}
	testBadSessionInput(t, ctx, cli)
	t.Run("closed session", func(t *testing.T) {
		s := openSession(t, cli)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		name := uniqueName(t)
		if _, err := NewMutex(s, name).Lock(ctx); !errors.Is(err, ErrSessionClosed) {
			t.Fatalf("Lock on a closed session: %v", err)
		}
		if keys := keysUnder(t, cli, name); len(keys) != 0 {
			t.Fatalf("keys left: %v", keys)
		}
	})
	t.Run("canceled context", func(t *testing.T) {
		dead, cancel := context.WithCancelCause(context.Background())
		cause := errors.New("caller gave up")
		cancel(cause)
		name := uniqueName(t)
		_, err := NewMutex(s, name).Lock(dead)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
			t.Fatalf("Lock with canceled ctx: %v, want context.Canceled and its cause", err)
		}
		if keys := keysUnder(t, cli, name); len(keys) != 0 {
			t.Fatalf("keys left: %v", keys)
		}
	})
}

// testBadSessionInput checks that NewSession refuses each invalid argument.
func testBadSessionInput(t *testing.T, ctx context.Context, cli *clientv3.Client) {
	t.Helper()
	for _, tc := range []struct {
		name string
		cli  *clientv3.Client
		opts []SessionOption
	}{
		{"nil client", nil, nil},
		{"zero TTL", cli, []SessionOption{WithTTL(0)}},
		{"negative TTL", cli, []SessionOption{WithTTL(-time.Second)}},
		{"TTL over 24h", cli, []SessionOption{WithTTL(25 * time.Hour)}},
		{"empty identity", cli, []SessionOption{WithIdentity("")}},
		{"nil logger", cli, []SessionOption{WithLogger(nil)}},
		{"nil option", cli, []SessionOption{nil}},
		{"nil observer", cli, []SessionOption{WithObserver(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := NewSession(ctx, tc.cli, tc.opts...); !errors.Is(err, ErrInvalidArgument) || s != nil {
				t.Fatalf("NewSession: %v, %v; want ErrInvalidArgument", s, err)
			}
		})
	}
}

func TestPrefixNamesDoNotInterfere(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	base := uniqueName(t)
	names := []string{base + "/jobs/a", base + "/jobs/a/b", base + "/jobs/a%/m", base + "/jobs/a\x00"}
	var locks []*Lock
	for _, n := range names {
		l, err := NewMutex(openSession(t, nil), n).TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock %q while the others are held: %v", n, err)
		}
		locks = append(locks, l)
	}
	for _, l := range locks {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestKindMismatch(t *testing.T) {
	cli := newClient(t, nil)
	s := openSession(t, cli)
	name := uniqueName(t)
	ctx := testCtx(t, 30*time.Second)
	// Another recipe's key (as an election would write it) on the same name.
	key, err := newWaiterKey(namePrefix(name), tagElection, s.Lease())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, key, encodeValue("other", "v", time.Now(), time.Time{}), clientv3.WithLease(s.Lease())); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMutex(s, name).TryLock(ctx); !errors.Is(err, ErrKindMismatch) {
		t.Fatalf("TryLock: %v, want ErrKindMismatch", err)
	}
	if _, err := NewMutex(s, name).Lock(ctx); !errors.Is(err, ErrKindMismatch) {
		t.Fatalf("Lock: %v, want ErrKindMismatch", err)
	}
	waitFor(t, 2*time.Second, "only the other key left", func() bool { return len(keysUnder(t, cli, name)) == 1 })
}

func TestGuard(t *testing.T) {
	cli := newClient(t, nil)
	ctx := testCtx(t, 30*time.Second)
	name := uniqueName(t)
	l := mustLock(t, NewMutex(openSession(t, cli), name))
	data := name + "-data"
	resp, err := cli.Txn(ctx).If(l.Guard()).Then(clientv3.OpPut(data, "1")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("guarded write while held: %v %v", resp, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err = cli.Txn(ctx).If(l.Guard()).Then(clientv3.OpPut(data, "2")).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("guarded write after unlock succeeded: %v %v", resp, err)
	}
}
