package etcdlock_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/internal/locktest"
	"github.com/etcdlock/etcdlock/internal/testhook"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestDescribeAndList(t *testing.T) {
	cli := shared.TestClient(t)
	base := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, 30*time.Second)
	s1 := locktest.OpenSession(t, cli, etcdlock.WithIdentity("one"))
	s2 := locktest.OpenSession(t, cli, etcdlock.WithIdentity("two"))
	name := base + "/jobs/a"
	holder := mustLock(t, etcdlock.NewMutex(s1, name))
	got := make(chan *etcdlock.Lock, 1)
	go func() {
		l, err := etcdlock.NewMutex(s2, name).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "waiter", func() bool { return len(keysUnder(t, cli, name)) == 2 })
	other := mustLock(t, etcdlock.NewMutex(s2, base+"/jobs/a/b"))

	checkDescribe(t, ctx, cli, name, holder, s1, s2)
	checkList(t, ctx, cli, base, name, other)
	checkDescribeBadInput(t, ctx, cli, base)
	_ = holder.Unlock(ctx)
	if l := <-got; l != nil {
		_ = l.Unlock(ctx)
	}
	_ = other.Unlock(ctx)
	after, err := etcdlock.List(ctx, cli, base+"/")
	if err != nil || len(after) != 0 {
		t.Fatalf("list after release: %+v %v", after, err)
	}
}

func TestListPages(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli)
	base := embedtest.UniqueName(t, "test")
	ctx := embedtest.Context(t, time.Minute)
	n := testhook.ListPage + 50
	for i := 0; i < n; i++ {
		key, err := testhook.NewWaiterKey(layout.NamePrefix(base+"/"+padded(i)), testhook.TagMutex, s.Lease())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, key, testhook.EncodeValue("bulk", "", time.Now(), time.Time{})); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = cli.Delete(ctx, layout.ListPrefix(base+"/"), clientv3.WithPrefix()) })
	all, err := etcdlock.List(ctx, cli, base+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != n {
		t.Fatalf("listed %d names, want %d", len(all), n)
	}
}

func padded(i int) string {
	return string(rune('a'+i/1000)) + "-" + string(rune('a'+(i/100)%10)) + string(rune('a'+(i/10)%10)) + string(rune('a'+i%10))
}

// checkDescribe checks Describe of name: holder holds it (on s1, as "one"),
// and a waiter of s2 ("two") waits.
func checkDescribe(t *testing.T, ctx context.Context, cli *clientv3.Client, name string, holder *etcdlock.Lock, s1, s2 *etcdlock.Session) {
	t.Helper()
	st, err := etcdlock.Describe(ctx, cli, name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != name || st.Holder == nil || st.Holder != &st.Holders[0] || len(st.Holders) != 1 || len(st.Waiters) != 1 || st.Revision == 0 {
		t.Fatalf("state %+v", st)
	}
	checkEntries(t, st, holder, s1, s2)
}

// checkList checks List under base: name and base+"/jobs/a/b" (held by
// other), read at one revision.
func checkList(t *testing.T, ctx context.Context, cli *clientv3.Client, base, name string, other *etcdlock.Lock) {
	t.Helper()
	all, err := etcdlock.List(ctx, cli, base+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Name != name || all[1].Name != base+"/jobs/a/b" || all[1].Holder.Token != other.Token() {
		t.Fatalf("list %+v", all)
	}
	if all[0].Revision != all[1].Revision {
		t.Fatal("list read at two revisions")
	}
}

// checkDescribeBadInput checks Describe of a free name and of bad input,
// and List of bad input.
func checkDescribeBadInput(t *testing.T, ctx context.Context, cli *clientv3.Client, base string) {
	t.Helper()
	free, err := etcdlock.Describe(ctx, cli, base+"/free")
	if err != nil || free.Holder != nil || len(free.Holders)+len(free.Waiters) != 0 {
		t.Fatalf("free lock: %+v %v", free, err)
	}
	if _, err := etcdlock.Describe(ctx, cli, ""); !errors.Is(err, etcdlock.ErrInvalidName) {
		t.Fatalf("Describe(\"\"): %v", err)
	}
	if _, err := etcdlock.Describe(ctx, nil, "x"); !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("Describe(nil client): %v", err)
	}
	if _, err := etcdlock.List(ctx, nil, ""); !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("List(nil client): %v", err)
	}
}

// checkEntries checks st's holder (holder, on s1, as "one") and waiter (on
// s2, as "two", with a later token).
func checkEntries(t *testing.T, st *etcdlock.LockState, holder *etcdlock.Lock, s1, s2 *etcdlock.Session) {
	t.Helper()
	h, w := st.Holders[0], st.Waiters[0]
	if h.Key != holder.Key() || h.Token != holder.Token() || h.Lease != s1.Lease() || h.Identity != "one" || h.Kind != "mutex" || h.Mode != "" {
		t.Fatalf("holder %+v", h)
	}
	if w.Identity != "two" || w.Lease != s2.Lease() || w.Token <= h.Token {
		t.Fatalf("waiter %+v", w)
	}
}

// TestDescribeEnqueuedAndSize: each entry tells when its key entered the
// queue (the writing client's clock) and a semaphore's size.
func TestDescribeEnqueuedAndSize(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 30*time.Second)
	s := locktest.OpenSession(t, cli)
	for _, tc := range []struct {
		what string
		size int
		lock func(name string) (*etcdlock.Lock, error)
	}{
		{"mutex", 0, func(name string) (*etcdlock.Lock, error) { return etcdlock.NewMutex(s, name).Lock(ctx) }},
		{"semaphore", 3, func(name string) (*etcdlock.Lock, error) { return etcdlock.NewSemaphore(s, name, 3).Acquire(ctx) }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			name := embedtest.UniqueName(t, "test")
			before := time.Now().Truncate(time.Millisecond) // recorded in milliseconds
			if _, err := tc.lock(name); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			st, err := etcdlock.Describe(ctx, cli, name)
			if err != nil || st.Holder == nil {
				t.Fatalf("Describe: %+v, %v", st, err)
			}
			if h := st.Holder; h.Size != tc.size || h.Enqueued.Before(before) || h.Enqueued.After(after) {
				t.Fatalf("holder: size %d, enqueued %v; want size %d, enqueued within [%v, %v]", h.Size, h.Enqueued, tc.size, before, after)
			}
		})
	}
}

// TestStateOfMatchesDescribe: StateOf over a name's keys, in any order,
// is what Describe reads.
func TestStateOfMatchesDescribe(t *testing.T) {
	cli := shared.TestClient(t)
	ctx := embedtest.Context(t, 30*time.Second)
	name := embedtest.UniqueName(t, "test")
	sem := func() *etcdlock.Semaphore { return etcdlock.NewSemaphore(locktest.OpenSession(t, cli), name, 2) }
	for i := 0; i < 2; i++ {
		if _, err := sem().Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err := sem().TryAcquire(ctx)
	if !errors.Is(err, etcdlock.ErrLocked) {
		t.Fatalf("third TryAcquire: %v, want ErrLocked", err)
	}
	waiter := sem()
	go func() { _, _ = waiter.Acquire(ctx) }() // ends with the test's sessions
	var want *etcdlock.LockState
	waitFor(t, 10*time.Second, "the waiter in the queue", func() bool {
		st, err := etcdlock.Describe(ctx, cli, name)
		want = st
		return err == nil && len(st.Waiters) == 1
	})
	resp, err := cli.Get(ctx, layout.NamePrefix(name), clientv3.WithPrefix(), clientv3.WithRev(want.Revision))
	if err != nil {
		t.Fatal(err)
	}
	kvs := resp.Kvs
	slices.Reverse(kvs)
	got := etcdlock.StateOf(name, kvs, want.Revision)
	if !reflect.DeepEqual(&got, want) {
		t.Fatalf("StateOf = %+v\nDescribe = %+v", got, want)
	}
	if other := etcdlock.StateOf("other", kvs, want.Revision); other.Holder != nil || len(other.Waiters) != 0 {
		t.Fatalf("StateOf of another name: %+v, want empty", other)
	}
}
