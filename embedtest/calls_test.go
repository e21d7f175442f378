package embedtest_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock/embedtest"
)

func TestCalls(t *testing.T) {
	ctx := testContext(t)
	ms := shared.Members()
	m := ms[1]
	mcli := client(t, m.Client)
	// Connect first, so that nothing below is a retry.
	if _, err := mcli.Get(ctx, "calls/warmup", clientv3.WithSerializable()); err != nil {
		t.Fatal(err)
	}

	checkRangeCalls(t, ctx, ms, m, mcli)
	checkKeepAliveCalls(t, ctx, m, mcli)
	checkWatchCalls(t, ctx, m, mcli)
}

// checkRangeCalls: n Gets through mcli count on m's Range alone, no other
// member's, and in m's total; a method never called counts 0.
func checkRangeCalls(t *testing.T, ctx context.Context, ms []*embedtest.Member, m *embedtest.Member, mcli *clientv3.Client) {
	t.Helper()
	const rangeMethod = "/etcdserverpb.KV/Range"
	before := make([]int64, len(ms))
	for i, o := range ms {
		before[i] = o.Calls(rangeMethod)
	}
	total := m.Calls("")
	const n = 5
	for range n {
		if _, err := mcli.Get(ctx, "calls/k", clientv3.WithSerializable()); err != nil {
			t.Fatal(err)
		}
	}
	for i, o := range ms {
		want := before[i]
		if o == m {
			want += n
		}
		if got := o.Calls(rangeMethod); got != want {
			t.Errorf("%s: Calls(Range) = %d, want %d", o.Name(), got, want)
		}
	}
	if got := m.Calls(""); got < total+n {
		t.Errorf(`Calls("") = %d, want at least %d`, got, total+n)
	}
	if got := m.Calls("/no.such/Method"); got != 0 {
		t.Errorf("Calls of an unknown method = %d", got)
	}
}

// checkKeepAliveCalls: stream messages count, each keepalive request.
func checkKeepAliveCalls(t *testing.T, ctx context.Context, m *embedtest.Member, mcli *clientv3.Client) {
	t.Helper()
	const keepAlive = "/etcdserverpb.Lease/LeaseKeepAlive"
	lease, err := mcli.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	ka := m.Calls(keepAlive)
	for range 3 {
		if _, err := mcli.KeepAliveOnce(ctx, lease.ID); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Calls(keepAlive) - ka; got != 3 {
		t.Errorf("Calls(LeaseKeepAlive) grew by %d, want 3", got)
	}
	if _, err := mcli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
}

// checkWatchCalls: a watch's create request counts on its stream.
func checkWatchCalls(t *testing.T, ctx context.Context, m *embedtest.Member, mcli *clientv3.Client) {
	t.Helper()
	const watch = "/etcdserverpb.Watch/Watch"
	w0 := m.Calls(watch)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := mcli.Watch(wctx, "calls/w", clientv3.WithCreatedNotify())
	if resp := <-wch; !resp.Created {
		t.Fatalf("watch not created: %v", resp.Err())
	}
	if got := m.Calls(watch); got <= w0 {
		t.Errorf("Calls(Watch) = %d, was %d before a watch", got, w0)
	}
}
