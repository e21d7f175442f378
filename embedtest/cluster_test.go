package embedtest_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/etcdlock/etcdlock/embedtest"
)

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

// checkMember checks m, Members()[i] of the shared cluster: its name, that
// Member finds it, its endpoint's form, that it runs and is not isolated.
func checkMember(t *testing.T, i int, m *embedtest.Member) {
	t.Helper()
	if m.Name() != "m"+string(rune('0'+i)) {
		t.Errorf("member %d is named %q", i, m.Name())
	}
	if shared.Member(m.Name()) != m {
		t.Errorf("Member(%q) is not Members()[%d]", m.Name(), i)
	}
	u, err := url.Parse(m.Endpoint())
	if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" {
		t.Errorf("endpoint %q is not http://127.0.0.1:port (%v)", m.Endpoint(), err)
	}
	if !m.Running() || m.Server() == nil || m.Isolated() {
		t.Errorf("%s: running %v, server %v, isolated %v", m.Name(), m.Running(), m.Server() != nil, m.Isolated())
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
		checkMember(t, i, m)
		if eps[i] != m.Endpoint() {
			t.Errorf("Endpoints()[%d] = %s, Endpoint() = %s", i, eps[i], m.Endpoint())
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
