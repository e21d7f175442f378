package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestReleaseEndsWithSession checks that Unlock and Resign with a context
// that never ends return once the session ends or its client is closed while
// their delete cannot reach etcd (a cut link), with ErrNotHeld and the
// session's error, instead of retrying forever.
func TestReleaseEndsWithSession(t *testing.T) {
	t.Parallel() // touches only its own cluster and names; mostly waits
	c := embedtest.Start(t)
	waitLeader(t, c)
	for _, tc := range []struct {
		name    string
		resign  bool                                            // Election.Resign instead of Lock.Unlock
		close   func(s *etcdlock.Session, cli *clientv3.Client) // ends the session
		wantErr error
	}{
		{"unlock/client closed", false, func(_ *etcdlock.Session, cli *clientv3.Client) { _ = cli.Close() }, etcdlock.ErrSessionExpired},
		{"unlock/session closed", false, func(s *etcdlock.Session, _ *clientv3.Client) { _ = s.Close() }, etcdlock.ErrSessionClosed},
		{"resign/client closed", true, func(_ *etcdlock.Session, cli *clientv3.Client) { _ = cli.Close() }, etcdlock.ErrSessionExpired},
		{"resign/session closed", true, func(s *etcdlock.Session, _ *clientv3.Client) { _ = s.Close() }, etcdlock.ErrSessionClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flaky, link, err := c.FlakyClient()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { flaky.Close() })
			s := locktest.OpenSession(t, flaky, etcdlock.WithTTL(30*time.Second)) // outlives the test: only tc.close ends it
			var release func(context.Context) error
			var held context.Context
			if tc.resign {
				l, err := etcdlock.NewElection(s, embedtest.UniqueName(t, "test")).Campaign(embedtest.Context(t, 10*time.Second), "v")
				if err != nil {
					t.Fatal(err)
				}
				release, held = l.Resign, l.Context()
			} else {
				l := mustLock(t, etcdlock.NewMutex(s, embedtest.UniqueName(t, "test")))
				release, held = l.Unlock, l.Context()
			}
			link.Cut()
			t.Cleanup(link.Restore)
			errc := make(chan error, 1)
			go func() { errc <- release(context.Background()) }()
			<-held.Done() // the release has begun: the session ends while it retries
			if cause := context.Cause(held); !errors.Is(cause, etcdlock.ErrReleased) {
				t.Fatalf("grant ended with %v before the release", cause)
			}
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				tc.close(s, flaky)
			}()
			t.Cleanup(func() { <-closed })
			select {
			case err := <-errc:
				if !errors.Is(err, etcdlock.ErrNotHeld) || !errors.Is(err, tc.wantErr) {
					t.Fatalf("release: %v, want ErrNotHeld and %v", err, tc.wantErr)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("release with context.Background never returned after the session ended")
			}
		})
	}
}
