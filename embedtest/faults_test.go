package embedtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock/embedtest"
)

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
