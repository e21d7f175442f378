package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestBadInput(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	ctx := embedtest.Context(t, 30*time.Second)
	long := strings.Repeat("x", 1025)
	for _, tc := range []struct {
		name string
		m    *etcdlock.Mutex
		want error
	}{
		{"empty name", etcdlock.NewMutex(s, ""), etcdlock.ErrInvalidName},
		{"long name", etcdlock.NewMutex(s, long), etcdlock.ErrInvalidName},
		{"invalid utf-8", etcdlock.NewMutex(s, "a\xffb"), etcdlock.ErrInvalidName},
		{"nil session", etcdlock.NewMutex(nil, "x"), etcdlock.ErrInvalidArgument},
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
	if _, err := etcdlock.NewMutex(s, strings.Repeat("é", 512)).TryLock(ctx); err != nil {
		t.Fatalf("a 1024-byte name: %v", err)
	}
	testBadSessionInput(t, ctx, cli)
	t.Run("closed session", func(t *testing.T) {
		s := locktest.OpenSession(t, cli)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		name := embedtest.UniqueName(t, "test")
		if _, err := etcdlock.NewMutex(s, name).Lock(ctx); !errors.Is(err, etcdlock.ErrSessionClosed) {
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
		name := embedtest.UniqueName(t, "test")
		_, err := etcdlock.NewMutex(s, name).Lock(dead)
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
		opts []etcdlock.SessionOption
	}{
		{"nil client", nil, nil},
		{"zero TTL", cli, []etcdlock.SessionOption{etcdlock.WithTTL(0)}},
		{"negative TTL", cli, []etcdlock.SessionOption{etcdlock.WithTTL(-time.Second)}},
		{"TTL over 24h", cli, []etcdlock.SessionOption{etcdlock.WithTTL(25 * time.Hour)}},
		{"empty identity", cli, []etcdlock.SessionOption{etcdlock.WithIdentity("")}},
		{"nil logger", cli, []etcdlock.SessionOption{etcdlock.WithLogger(nil)}},
		{"nil option", cli, []etcdlock.SessionOption{nil}},
		{"nil observer", cli, []etcdlock.SessionOption{etcdlock.WithObserver(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := etcdlock.NewSession(ctx, tc.cli, tc.opts...); !errors.Is(err, etcdlock.ErrInvalidArgument) || s != nil {
				t.Fatalf("NewSession: %v, %v; want ErrInvalidArgument", s, err)
			}
		})
	}
}

func TestPrefixNamesDoNotInterfere(t *testing.T) {
	ctx := embedtest.Context(t, 30*time.Second)
	base := embedtest.UniqueName(t, "test")
	names := []string{base + "/jobs/a", base + "/jobs/a/b", base + "/jobs/a%/m", base + "/jobs/a\x00"}
	var locks []*etcdlock.Lock
	for _, n := range names {
		l, err := etcdlock.NewMutex(locktest.OpenSession(t, shared.TestClient(t)), n).TryLock(ctx)
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
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	name := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	// Another recipe's key (as an election would write it) on the same name.
	key, err := testhook.NewWaiterKey(layout.NamePrefix(name), testhook.TagElection, s.Lease())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, key, testhook.EncodeValue("other", "v", time.Now(), time.Time{}), clientv3.WithLease(s.Lease())); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdlock.NewMutex(s, name).TryLock(ctx); !errors.Is(err, etcdlock.ErrKindMismatch) {
		t.Fatalf("TryLock: %v, want ErrKindMismatch", err)
	}
	if _, err := etcdlock.NewMutex(s, name).Lock(ctx); !errors.Is(err, etcdlock.ErrKindMismatch) {
		t.Fatalf("Lock: %v, want ErrKindMismatch", err)
	}
	waitFor(t, 2*time.Second, "only the other key left", func() bool { return len(keysUnder(t, cli, name)) == 1 })
}

func TestGuard(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 30*time.Second)
	name := embedtest.UniqueName(t, "test")
	l := mustLock(t, etcdlock.NewMutex(locktest.OpenSession(t, cli), name))
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
