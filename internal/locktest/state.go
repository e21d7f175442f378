package locktest

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// stateTimeout bounds Describe's read and WaitState's wait: generous, for
// a busy machine under -race.
const stateTimeout = 30 * time.Second

// Describe returns name's state as etcdlock.Describe reads it on cli. It
// fails t when the read fails or takes longer than 30 s.
func Describe(t testing.TB, cli *clientv3.Client, name string) *etcdlock.LockState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stateTimeout)
	defer cancel()
	st, err := etcdlock.Describe(ctx, cli, name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// WaitState reads name's state every 20 ms until cond holds, and returns
// that state. A read that fails is tried again (a test may be cutting the
// cluster's links meanwhile). It fails t after 30 s, saying what it waited
// for (what) and the last state or error.
func WaitState(t testing.TB, cli *clientv3.Client, name, what string, cond func(*etcdlock.LockState) bool) *etcdlock.LockState {
	t.Helper()
	deadline := time.Now().Add(stateTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), stateTimeout)
		st, err := etcdlock.Describe(ctx, cli, name)
		cancel()
		if err == nil && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("timed out waiting for %s on %q; last read: %v", what, name, err)
			}
			t.Fatalf("timed out waiting for %s on %q; last state: holder %v, %d waiters", what, name, st.Holder, len(st.Waiters))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
