package embedtest_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/etcdlock/etcdlock/embedtest"
)

// Generous bounds for awaiting events on a busy 2-core machine under -race.
const (
	awaitTimeout   = 45 * time.Second
	attemptTimeout = 3 * time.Second
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), awaitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// eventually calls f, each time with a context bounded by attemptTimeout,
// until it returns nil; it fails the test when ctx ends first.
func eventually(t *testing.T, ctx context.Context, what string, f func(ctx context.Context) error) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		err := f(actx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: still failing when the wait ended: %v", what, err)
		case <-tick.C:
		}
	}
}

func client(t *testing.T, newClient func() (*clientv3.Client, error)) *clientv3.Client {
	t.Helper()
	cli, err := newClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func waitLeader(t *testing.T, ctx context.Context, c *embedtest.Cluster) *embedtest.Member {
	t.Helper()
	l, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func follower(t *testing.T, c *embedtest.Cluster, leader *embedtest.Member) *embedtest.Member {
	t.Helper()
	for _, m := range c.Members() {
		if m != leader {
			return m
		}
	}
	t.Fatal("no follower")
	return nil
}

// serializableValue reads key from the member behind cli without consensus.
func serializableValue(ctx context.Context, cli *clientv3.Client, key string) (string, error) {
	r, err := cli.Get(ctx, key, clientv3.WithSerializable())
	if err != nil {
		return "", err
	}
	if len(r.Kvs) == 0 {
		return "", errors.New("key not found")
	}
	return string(r.Kvs[0].Value), nil
}

func wantValue(ctx context.Context, cli *clientv3.Client, key, want string) error {
	got, err := serializableValue(ctx, cli, key)
	if err != nil {
		return err
	}
	if got != want {
		return errors.New("value " + got + ", want " + want)
	}
	return nil
}

func TestPutGet(t *testing.T) {
	ctx := testContext(t)
	cli := client(t, shared.Client)
	if _, err := cli.Put(ctx, "putget/k", "v"); err != nil {
		t.Fatal(err)
	}
	r, err := cli.Get(ctx, "putget/k")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("Get = %v, want putget/k=v", r.Kvs)
	}
	// Every member serves it, each through its own client.
	for _, m := range shared.Members() {
		mcli := client(t, m.Client)
		eventually(t, ctx, m.Name()+" serves putget/k", func(ctx context.Context) error {
			return wantValue(ctx, mcli, "putget/k", "v")
		})
	}
}

func TestMembersAndEndpoints(t *testing.T) {
	ms := shared.Members()
	if len(ms) != embedtest.DefaultMembers {
		t.Fatalf("%d members, want %d", len(ms), embedtest.DefaultMembers)
	}
	eps := shared.Endpoints()
	ids := map[uint64]bool{}
	for i, m := range ms {
		if m.Name() != "m"+string(rune('0'+i)) {
			t.Errorf("member %d is named %q", i, m.Name())
		}
		if shared.Member(m.Name()) != m {
			t.Errorf("Member(%q) is not Members()[%d]", m.Name(), i)
		}
		if eps[i] != m.Endpoint() {
			t.Errorf("Endpoints()[%d] = %s, Endpoint() = %s", i, eps[i], m.Endpoint())
		}
		u, err := url.Parse(m.Endpoint())
		if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" {
			t.Errorf("endpoint %q is not http://127.0.0.1:port (%v)", m.Endpoint(), err)
		}
		if !m.Running() || m.Server() == nil || m.Isolated() {
			t.Errorf("%s: running %v, server %v, isolated %v", m.Name(), m.Running(), m.Server() != nil, m.Isolated())
		}
		if m.ID() == 0 || ids[m.ID()] {
			t.Errorf("%s: ID %x is zero or repeated", m.Name(), m.ID())
		}
		ids[m.ID()] = true
	}
	if shared.Member("nope") != nil {
		t.Error(`Member("nope") != nil`)
	}
	if l := shared.Leader(); l == nil {
		t.Error("Leader() = nil on a healthy cluster")
	}
	if _, err := os.Stat(filepath.Join(shared.Dir(), "m0")); err != nil {
		t.Errorf("data of m0: %v", err)
	}
}

func TestKillLeaderAndRestart(t *testing.T) {
	c := embedtest.Start(t)
	ctx := testContext(t)
	cli := client(t, c.Client)

	old := waitLeader(t, ctx, c)
	if _, err := cli.Put(ctx, "kill/before", "1"); err != nil {
		t.Fatal(err)
	}
	calls := old.Calls("")

	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := old.Kill(); !errors.Is(err, embedtest.ErrNotRunning) {
		t.Errorf("second Kill = %v, want ErrNotRunning", err)
	}
	if old.Running() || old.Server() != nil {
		t.Errorf("killed member: Running %v, Server %v", old.Running(), old.Server() != nil)
	}

	leader := waitLeader(t, ctx, c)
	if leader == old {
		t.Fatal("the killed member is still the leader")
	}
	eventually(t, ctx, "put after failover", func(ctx context.Context) error {
		_, err := cli.Put(ctx, "kill/during", "2")
		return err
	})

	if err := old.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := old.Restart(); !errors.Is(err, embedtest.ErrRunning) {
		t.Errorf("second Restart = %v, want ErrRunning", err)
	}
	if err := old.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	ocli := client(t, old.Client)
	eventually(t, ctx, "restarted member serves the key written while it was down", func(ctx context.Context) error {
		return wantValue(ctx, ocli, "kill/during", "2")
	})
	if got := old.Calls(""); got <= calls {
		t.Errorf("Calls(\"\") = %d after restart, was %d before the kill: counters must accumulate", got, calls)
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestIsolateFollower(t *testing.T) {
	c := embedtest.Start(t)
	ctx := testContext(t)
	cli := client(t, c.Client)

	leader := waitLeader(t, ctx, c)
	f := follower(t, c, leader)
	fcli := client(t, f.Client)
	if _, err := cli.Put(ctx, "iso/before", "1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "follower has iso/before", func(ctx context.Context) error {
		return wantValue(ctx, fcli, "iso/before", "1")
	})

	if err := f.Isolate(); err != nil {
		t.Fatal(err)
	}
	if !f.Isolated() {
		t.Fatal("Isolated() = false after Isolate")
	}
	// The majority goes on: a write through the cluster client succeeds
	// (an attempt that lands on the isolated member fails and is retried).
	eventually(t, ctx, "write while a follower is isolated", func(ctx context.Context) error {
		_, err := cli.Put(ctx, "iso/during", "2")
		return err
	})
	if l := c.Leader(); l == f {
		t.Fatal("the isolated member is reported as leader")
	}
	// The isolated member's client port answers, but without a leader.
	eventually(t, ctx, "isolated member reports no leader", func(ctx context.Context) error {
		st, err := fcli.Status(ctx, f.Endpoint())
		if err != nil {
			return err
		}
		if st.Leader != 0 {
			return errors.New("isolated member still names a leader")
		}
		return nil
	})
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err := fcli.Get(rctx, "iso/during")
	cancel()
	if err == nil {
		t.Fatal("linearizable read on the isolated member succeeded")
	}
	t.Logf("linearizable read on the isolated member: %v", err)

	if err := f.Heal(); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "healed member catches up", func(ctx context.Context) error {
		return wantValue(ctx, fcli, "iso/during", "2")
	})
	eventually(t, ctx, "linearizable read on the healed member", func(ctx context.Context) error {
		_, err := fcli.Get(ctx, "iso/during")
		return err
	})
}

func TestIsolateLeader(t *testing.T) {
	c := embedtest.Start(t)
	ctx := testContext(t)
	cli := client(t, c.Client)

	old := waitLeader(t, ctx, c)
	if err := old.Isolate(); err != nil {
		t.Fatal(err)
	}
	leader := waitLeader(t, ctx, c)
	if leader == old {
		t.Fatal("the isolated member is still the agreed leader")
	}
	eventually(t, ctx, "write after the leader was isolated", func(ctx context.Context) error {
		_, err := cli.Put(ctx, "isoleader/k", "v")
		return err
	})
	if err := old.Heal(); err != nil {
		t.Fatal(err)
	}
	ocli := client(t, old.Client)
	eventually(t, ctx, "old leader catches up", func(ctx context.Context) error {
		return wantValue(ctx, ocli, "isoleader/k", "v")
	})
}

// TestLinkHold: a Put the client gave up on (deadline exceeded, then the
// client closed) during a Hold is applied after Restore.
func TestLinkHold(t *testing.T) {
	ctx := testContext(t)
	link, err := shared.NewLink()
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	cfg := shared.ClientConfig()
	cfg.Endpoints = link.Endpoints()
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	other := client(t, shared.Client)
	r, err := other.Get(ctx, "hold/k")
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wch := other.Watch(wctx, "hold/k", clientv3.WithRev(r.Header.Revision+1))
	if _, err := cli.Get(ctx, "hold/warm"); err != nil { // connected
		t.Fatal(err)
	}

	link.Hold()
	if !link.IsCut() {
		t.Fatal("IsCut() = false after Hold")
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = cli.Put(pctx, "hold/k", "late")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put through a held link = %v, want deadline exceeded", err)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	link.Restore()
	select {
	case wr := <-wch:
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		if len(wr.Events) != 1 || string(wr.Events[0].Kv.Value) != "late" {
			t.Fatalf("watch: %v, want the late put", wr.Events)
		}
	case <-ctx.Done():
		t.Fatal("the held Put was not applied after Restore")
	}
}

func TestFlakyClient(t *testing.T) {
	ctx := testContext(t)
	cli, link, err := shared.FlakyClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if eps := link.Endpoints(); len(eps) != len(shared.Members()) || slices.Equal(eps, shared.Endpoints()) {
		t.Fatalf("link endpoints %v, cluster endpoints %v", eps, shared.Endpoints())
	}
	if _, err := cli.Put(ctx, "flaky/k", "v"); err != nil {
		t.Fatal(err)
	}

	link.Cut()
	if !link.IsCut() {
		t.Fatal("IsCut() = false after Cut")
	}
	gctx, cancel := context.WithTimeout(ctx, time.Second)
	_, err = cli.Get(gctx, "flaky/k")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get through a cut link = %v, want deadline exceeded", err)
	}
	// Only this client is cut off.
	other := client(t, shared.Client)
	if _, err := other.Put(ctx, "flaky/k", "w"); err != nil {
		t.Fatal(err)
	}

	link.Restore()
	eventually(t, ctx, "get after Restore", func(ctx context.Context) error {
		r, err := cli.Get(ctx, "flaky/k")
		if err == nil && (len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "w") {
			err = errors.New("wrong value")
		}
		return err
	})

	// Closing the client closes its link.
	addr := link.Endpoints()[0][len("http://"):]
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "link closed with its client", func(ctx context.Context) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil
		}
		conn.Close()
		return errors.New("link still accepts connections")
	})
}

func TestCalls(t *testing.T) {
	ctx := testContext(t)
	const rangeMethod = "/etcdserverpb.KV/Range"
	ms := shared.Members()
	m := ms[1]
	mcli := client(t, m.Client)
	// Connect first, so that nothing below is a retry.
	if _, err := mcli.Get(ctx, "calls/warmup", clientv3.WithSerializable()); err != nil {
		t.Fatal(err)
	}

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

	// Stream messages: each keepalive request counts.
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

	// A watch's create request counts on its stream.
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

func TestInvalidOptions(t *testing.T) {
	ctx := testContext(t)
	for name, opt := range map[string]embedtest.Option{
		"no members":          embedtest.WithMembers(0),
		"negative members":    embedtest.WithMembers(-1),
		"empty dir":           embedtest.WithDir(""),
		"zero tick":           embedtest.WithTick(0, time.Second),
		"negative tick":       embedtest.WithTick(-time.Millisecond, time.Second),
		"short election":      embedtest.WithTick(100*time.Millisecond, 400*time.Millisecond),
		"fractional tick":     embedtest.WithTick(1500*time.Microsecond, time.Second),
		"huge election":       embedtest.WithTick(100*time.Millisecond, time.Minute),
		"nil logger":          embedtest.WithLogger(nil),
		"nil option":          nil,
		"bad after good ones": embedtest.WithMembers(0),
	} {
		t.Run(name, func(t *testing.T) {
			opts := []embedtest.Option{opt}
			if name == "bad after good ones" {
				opts = []embedtest.Option{embedtest.WithMembers(1), embedtest.WithTick(50*time.Millisecond, 500*time.Millisecond), opt}
			}
			c, err := embedtest.New(ctx, opts...)
			if !errors.Is(err, embedtest.ErrInvalidOption) {
				t.Errorf("New = %v, want ErrInvalidOption", err)
			}
			if c != nil {
				t.Error("New returned a cluster with an error")
				_ = c.Close()
			}
		})
	}
}

func TestWithDirTickLogger(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	core, logs := observer.New(zapcore.InfoLevel)
	c := embedtest.Start(t,
		embedtest.WithDir(dir),
		embedtest.WithMembers(1),
		embedtest.WithTick(50*time.Millisecond, 500*time.Millisecond),
		embedtest.WithLogger(zap.New(core)),
	)
	ctx := testContext(t)
	if c.Dir() != dir {
		t.Errorf("Dir() = %q, want %q", c.Dir(), dir)
	}
	cli := client(t, c.Client)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if logs.Len() == 0 {
		t.Error("the members logged nothing through WithLogger")
	}
	cfg := c.Members()[0].Server().Config()
	if cfg.TickMs != 50 || cfg.ElectionMs != 500 {
		t.Errorf("ticks %d/%d ms, want 50/500", cfg.TickMs, cfg.ElectionMs)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "m0", "member")); err != nil {
		t.Errorf("data given with WithDir was not kept: %v", err)
	}
	// A directory that holds data is refused.
	if c2, err := embedtest.New(ctx, embedtest.WithDir(dir), embedtest.WithMembers(1)); err == nil {
		_ = c2.Close()
		t.Error("New over existing data succeeded")
	}
}

func TestClose(t *testing.T) {
	ctx := testContext(t)
	c, err := embedtest.New(ctx, embedtest.WithMembers(1))
	if err != nil {
		t.Fatal(err)
	}
	m := c.Members()[0]
	dir := c.Dir()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temporary data directory left behind: %v", err)
	}
	for name, f := range map[string]func() error{
		"Kill":    m.Kill,
		"Restart": m.Restart,
		"Isolate": m.Isolate,
		"Heal":    m.Heal,
		"Client":  func() error { _, err := c.Client(); return err },
		"MClient": func() error { _, err := m.Client(); return err },
		"Flaky":   func() error { _, _, err := c.FlakyClient(); return err },
		"Wait":    func() error { _, err := c.WaitLeader(ctx); return err },
	} {
		if err := f(); !errors.Is(err, embedtest.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if m.Running() || c.Leader() != nil {
		t.Error("a member still runs after Close")
	}
}

func TestTwoOfFiveDown(t *testing.T) {
	c := embedtest.Start(t, embedtest.WithMembers(5))
	ctx := testContext(t)
	cli := client(t, c.Client)

	old := waitLeader(t, ctx, c)
	f := follower(t, c, old)
	for _, m := range []*embedtest.Member{old, f} {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	if l := waitLeader(t, ctx, c); l == old || l == f {
		t.Fatalf("killed member %s leads", l.Name())
	}
	eventually(t, ctx, "write with 2 of 5 members down", func(ctx context.Context) error {
		_, err := cli.Put(ctx, "five/k", "v")
		return err
	})
	for _, m := range []*embedtest.Member{old, f} {
		if err := m.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []*embedtest.Member{old, f} {
		mcli := client(t, m.Client)
		eventually(t, ctx, m.Name()+" catches up", func(ctx context.Context) error {
			return wantValue(ctx, mcli, "five/k", "v")
		})
	}
}
