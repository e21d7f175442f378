//go:build unix

package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestBreak: break refuses without --force; with it, it removes the
// holder's key (the holder learns, the next waiter gets the lock, the lease
// is left alone); a free lock has nothing to break.
func TestBreak(t *testing.T) {
	cli := cluster.TestClient(t)
	name := embedtest.UniqueName(t, "cli")
	s, l := hold(t, cli, name, "stuck/1")
	queueUp(t, cli, name, "next/2")

	code, out, stderr := run(t, "break", name)
	if code != exitUsage || out != "" {
		t.Fatalf("break without --force: exit %d, stdout %q; want 1 and nothing", code, out)
	}
	oneErrorLine(t, stderr, "without --force")
	if st := locktest.Describe(t, cli, name); st.Holder == nil || st.Holder.Key != l.Key() {
		t.Fatalf("break without --force changed the holder: %+v", st.Holder)
	}

	code, out, stderr = run(t, "break", name, "--force")
	if code != 0 || stderr != "" {
		t.Fatalf("break --force: exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(out, l.Key()) || !strings.Contains(out, "stuck/1") || !strings.Contains(out, l.Token().String()) {
		t.Errorf("break does not say what it broke: %q", out)
	}
	checkBroken(t, cli, name, s, l)

	code, _, stderr = run(t, "break", embedtest.UniqueName(t, "cli"), "--force")
	if code != exitUsage {
		t.Errorf("break of a free lock: exit %d, want 1", code)
	}
	oneErrorLine(t, stderr, "nothing to break")
}

// checkBroken checks what follows break --force of l, held with s: l
// learns it lost the lock, next/2 holds it, s's lease lives on.
func checkBroken(t *testing.T, cli *clientv3.Client, name string, s *etcdlock.Session, l *etcdlock.Lock) {
	t.Helper()
	select {
	case <-l.Context().Done():
		if cause := context.Cause(l.Context()); !errors.Is(cause, etcdlock.ErrLockLost) {
			t.Errorf("holder's cause = %v, want ErrLockLost", cause)
		}
	case <-time.After(long):
		t.Fatal("the holder never learned that its lock was broken")
	}
	st := locktest.Describe(t, cli, name)
	if st.Holder == nil || st.Holder.Identity != "next/2" {
		t.Errorf("holder after break = %+v, want next/2", st.Holder)
	}
	// The lease was left alone.
	resp, err := cli.TimeToLive(embedtest.Context(t, long), s.Lease())
	if err != nil || resp.TTL <= 0 {
		t.Errorf("broken holder's lease: TTL %v, %v; want it alive", resp, err)
	}
}
