package shards_test

// Attacks on the seam: one cluster's session lost, Close, and bad input.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/layout"
	"github.com/etcdlock/etcdlock/shard"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseOf returns the lease of the key of grant l on cluster id.
func (d *deployment) leaseOf(t *testing.T, id, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := d.clients[id].Get(embedtest.Context(t, 10*time.Second), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the key %s on %s: %v, %v", key, id, resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// leases returns the leases alive on cluster id.
func (d *deployment) leases(t *testing.T, id string) map[clientv3.LeaseID]bool {
	t.Helper()
	resp, err := d.clients[id].Leases(embedtest.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out := map[clientv3.LeaseID]bool{}
	for _, l := range resp.Leases {
		out[l.ID] = true
	}
	return out
}

// TestAttackClusterLossAndClose: a shard.Session holds a grant on each
// cluster. c0's cluster session's lease is revoked from outside: only the
// grant on c0 is lost, the Session is not (Err nil, Done open), the grant
// on c1 is kept, and the next acquisition on c0 opens a new cluster
// session (another lease) and is granted. Close then closes every cluster
// session (the lost one too): no key and none of its leases is left on
// either cluster, Done closes and Err is ErrSessionClosed; acquisitions
// after Close fail with ErrSessionClosed.
func TestAttackClusterLossAndClose(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, 2*time.Minute)
	r := d.newShards(t)
	s, err := shard.NewSession(ctx, r, etcdlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n0, n1 := d.nameOn(t, "c0"), d.nameOn(t, "c1")
	before := map[string]map[clientv3.LeaseID]bool{"c0": d.leases(t, "c0"), "c1": d.leases(t, "c1")}
	l0 := mustLock(t, s.NewMutex(n0))
	l1 := mustLock(t, s.NewMutex(n1))
	lease0 := d.leaseOf(t, "c0", l0.Key())
	lease1 := d.leaseOf(t, "c1", l1.Key())
	if _, err := d.clients["c0"].Revoke(ctx, lease0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l0.Context().Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the grant on c0 outlived its revoked lease")
	}
	t.Logf("c0 grant lost: %v", context.Cause(l0.Context()))
	if s.Err() != nil || isDone(s.Done()) {
		t.Fatalf("the Session after one cluster's loss: Err %v, Done %v", s.Err(), isDone(s.Done()))
	}
	if l1.Context().Err() != nil {
		t.Fatalf("the grant on c1 was lost with c0's: %v", context.Cause(l1.Context()))
	}
	// The next acquisition on c0 opens a new cluster session.
	short, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	l0b, err := s.NewMutex(n0).Lock(short)
	if err != nil {
		t.Fatalf("lock on c0 after its session was lost: %v", err)
	}
	lease0b := d.leaseOf(t, "c0", l0b.Key())
	if lease0b == lease0 {
		t.Fatalf("granted again under the revoked lease %x", lease0)
	}
	// Run on a second name of c0 and an Election.Run on c1 still work.
	runDone := make(chan error, 1)
	go func() {
		runDone <- s.NewMutex(d.nameOn(t, "c0")).Run(ctx, func(context.Context, *etcdlock.Lock) error { return nil })
	}()
	if err := <-runDone; err != nil {
		t.Fatalf("Mutex.Run after the loss: %v", err)
	}
	checkClosed(t, d, s, []*etcdlock.Lock{l0b, l1}, n1, before, fmt.Sprintf("c0: %x then %x, c1: %x", int64(lease0), int64(lease0b), int64(lease1)))
}

// checkClosed closes s and checks what Close promises: Done and Err, each
// of held lost with ErrSessionClosed, nothing left on any cluster, and
// acquisitions (of name) after it refused.
func checkClosed(t *testing.T, d *deployment, s *shard.Session, held []*etcdlock.Lock, name string, before map[string]map[clientv3.LeaseID]bool, leases string) {
	t.Helper()
	ctx := embedtest.Context(t, 30*time.Second)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !isDone(s.Done()) || !errors.Is(s.Err(), etcdlock.ErrSessionClosed) {
		t.Fatalf("after Close: Done %v, Err %v", isDone(s.Done()), s.Err())
	}
	for _, l := range held {
		if !errors.Is(context.Cause(l.Context()), etcdlock.ErrSessionClosed) {
			t.Errorf("grant %s after Close: cause %v", l.Key(), context.Cause(l.Context()))
		}
	}
	d.checkNothingLeft(t, before, leases)
	if _, err := s.NewMutex(name).Lock(ctx); !errors.Is(err, etcdlock.ErrSessionClosed) {
		t.Fatalf("Lock after Close: %v, want ErrSessionClosed", err)
	}
	if _, err := s.LockAll(ctx, name); !errors.Is(err, etcdlock.ErrSessionClosed) {
		t.Fatalf("LockAll after Close: %v, want ErrSessionClosed", err)
	}
}

// checkNothingLeft fails t if a key, or a lease not in before, is left on
// any cluster.
func (d *deployment) checkNothingLeft(t *testing.T, before map[string]map[clientv3.LeaseID]bool, leases string) {
	t.Helper()
	ctx := embedtest.Context(t, 30*time.Second)
	for _, id := range d.ids {
		resp, err := d.clients[id].Get(ctx, layout.KeyRoot, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			t.Errorf("key left on %s after Close: %s", id, kv.Key)
		}
		for l := range d.leases(t, id) {
			if !before[id][l] {
				t.Errorf("lease %x left on %s after Close (%s)", int64(l), id, leases)
			}
		}
	}
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestAttackBadInput: nil Shards; LockAll over the limit, over two
// clusters, with no names and a name twice: ErrInvalidArgument with
// nothing written on any cluster.
func TestAttackBadInput(t *testing.T) {
	t.Parallel() // its own deployment
	d := startDeployment(t, 1, 1)
	ctx := embedtest.Context(t, time.Minute)
	if _, err := shard.NewSession(ctx, nil); !errors.Is(err, etcdlock.ErrInvalidArgument) {
		t.Fatalf("NewSession(nil) = %v", err)
	}
	r := d.newShards(t)
	s := session(t, r)
	a := d.nameOn(t, "c0")
	var many []string
	for i := 0; i <= shard.MaxLockAllNames; i++ {
		many = append(many, fmt.Sprintf("{%s}/%d", shard.KeyOf(a), i))
	}
	b := d.nameOn(t, "c1")
	cases := map[string][]string{
		"over the limit": many,
		"two clusters":   {a, b},
		"two clusters b": {b, a},
		"none":           nil,
		"twice":          {a, a},
		"empty name":     {a, ""},
	}
	for what, names := range cases {
		for _, f := range []func(context.Context, ...string) (*etcdlock.Locks, error){s.LockAll, s.TryLockAll} {
			if _, err := f(ctx, names...); !errors.Is(err, etcdlock.ErrInvalidArgument) && !errors.Is(err, etcdlock.ErrInvalidName) {
				t.Errorf("LockAll %s: %v, want ErrInvalidArgument", what, err)
			}
		}
	}
	if _, err := s.LockAll(ctx, many[:shard.MaxLockAllNames]...); err != nil {
		t.Errorf("LockAll of MaxLockAllNames names: %v", err)
	}
	for _, id := range d.ids {
		resp, err := d.clients[id].Get(ctx, layout.KeyRoot, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range resp.Kvs {
			if isQueueKey(string(kv.Key)) && !hasPrefixAny(string(kv.Key), many) {
				t.Errorf("key on %s after refused LockAlls: %s", id, kv.Key)
			}
		}
	}
}

func hasPrefixAny(key string, names []string) bool {
	for _, n := range names {
		if strings.HasPrefix(key, layout.NamePrefix(n)) {
			return true
		}
	}
	return false
}
