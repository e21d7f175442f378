package etcdlock_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func httpStatus(h http.Handler) int {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return rec.Code
}

func TestSessionHealth(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli, etcdlock.WithTTL(3*time.Second))
	if code := httpStatus(etcdlock.NewSessionHealth(s, time.Second)); code != http.StatusOK {
		t.Fatalf("live session: %d", code)
	}
	if code := httpStatus(etcdlock.NewSessionHealth(s, 10*time.Second)); code != http.StatusServiceUnavailable {
		t.Fatalf("headroom above the TTL: %d", code)
	}
	if _, err := cli.Revoke(embedtest.Context(t, 10*time.Second), s.Lease()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the session to notice", func() bool { return s.Err() != nil })
	if code := httpStatus(etcdlock.NewSessionHealth(s, 0)); code != http.StatusServiceUnavailable {
		t.Fatalf("lost session: %d", code)
	}
}

func TestLeaderHealth(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli, etcdlock.WithTTL(2*time.Second))
	e := etcdlock.NewElection(s, embedtest.UniqueName(t, "test"))
	h := etcdlock.NewLeaderHealth(e, 0)
	if code := httpStatus(h); code != http.StatusOK {
		t.Fatalf("not leading: %d", code)
	}
	ctx, cancel := context.WithCancel(embedtest.Context(t, time.Minute))
	leading := make(chan struct{})
	unstick := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		first := true
		done <- e.Run(ctx, "v", func(lctx context.Context) error {
			if first {
				first = false
				close(leading)
				<-unstick // a lead that ignores its context: the split-brain risk
				return nil
			}
			<-lctx.Done()
			return nil
		})
	}()
	<-leading
	if code := httpStatus(h); code != http.StatusOK {
		t.Fatalf("leading: %d", code)
	}
	if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	// The lease is gone, lead still runs: unhealthy once the validity ran out.
	waitFor(t, 10*time.Second, "the leader health to fail", func() bool { return httpStatus(h) == http.StatusServiceUnavailable })
	close(unstick)
	waitFor(t, 10*time.Second, "the leader health to recover", func() bool { return httpStatus(h) == http.StatusOK })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestLeaderHealthAfterBreak checks that LeaderHealth reports a leader whose
// term was broken (its key deleted, guarded by its create revision) while the
// session lives on and the lead function ignores its context: the validity
// clock alone still looks healthy then.
func TestLeaderHealthAfterBreak(t *testing.T) {
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli, etcdlock.WithTTL(30*time.Second))
	e := etcdlock.NewElection(s, embedtest.UniqueName(t, "test"))
	h := etcdlock.NewLeaderHealth(e, 0)
	ctx, cancel := context.WithCancel(embedtest.Context(t, time.Minute))
	defer cancel()
	leading := make(chan *etcdlock.Leadership, 1)
	unstick := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		first := true
		done <- e.Run(ctx, "v", func(lctx context.Context) error {
			l, _ := etcdlock.LeadershipFromContext(lctx)
			if first {
				first = false
				leading <- l
				<-unstick // a lead that ignores its context
				return nil
			}
			<-lctx.Done()
			return nil
		})
	}()
	l := <-leading
	if code := httpStatus(h); code != http.StatusOK {
		t.Fatalf("leading: %d", code)
	}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.Key()), "=", int64(l.Token()))).
		Then(clientv3.OpDelete(l.Key())).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("break: %v %v", resp, err)
	}
	<-l.Context().Done()
	if s.Err() != nil {
		t.Fatalf("session lost: %v", s.Err())
	}
	if code := httpStatus(h); code != http.StatusServiceUnavailable {
		t.Fatalf("term broken, lead still running: %d, want 503", code)
	}
	close(unstick)
	waitFor(t, 10*time.Second, "the leader health to recover", func() bool { return httpStatus(h) == http.StatusOK })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestStateChangesAreLogged checks one log line per state change, with the
// name, token, lease and identity.
func TestStateChangesAreLogged(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	cli := shared.TestClient(t)
	s := locktest.OpenSession(t, cli, etcdlock.WithLogger(zap.New(core)), etcdlock.WithIdentity("logger-test"))
	ctx := embedtest.Context(t, 30*time.Second)
	name := embedtest.UniqueName(t, "test")
	l := mustLock(t, etcdlock.NewMutex(s, name))
	lctx := l.Context()
	if _, err := cli.Delete(ctx, l.Key()); err != nil {
		t.Fatal(err)
	}
	<-lctx.Done()
	lead, err := etcdlock.NewElection(s, name+"/e").Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	for _, want := range []struct {
		msg   string
		level zapcore.Level
	}{
		{"granted", zapcore.DebugLevel},
		{"lock lost", zapcore.WarnLevel},
		{"leadership gained", zapcore.InfoLevel},
		{"leadership resigned", zapcore.InfoLevel},
		{"session lost", zapcore.WarnLevel},
	} {
		waitFor(t, 5*time.Second, "log line "+want.msg, func() bool { return logs.FilterMessage(want.msg).Len() == 1 })
		e := logs.FilterMessage(want.msg).All()[0]
		fields := e.ContextMap()
		if e.Level != want.level || fields["identity"] != "logger-test" || fields["lease"] == nil {
			t.Fatalf("%q: level %v fields %v", want.msg, e.Level, fields)
		}
		if want.msg != "session lost" && (fields["token"] == nil || fields["name"] == nil) {
			t.Fatalf("%q lacks name or token: %v", want.msg, fields)
		}
	}
	if n := logs.FilterLevelExact(zapcore.InfoLevel).Len(); n != 2 {
		t.Fatalf("%d Info lines; only leadership changes belong at Info", n)
	}
}
