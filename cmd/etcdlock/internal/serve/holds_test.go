package serve

import (
	"strings"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/cmd/etcdlock/internal/servetest"
	"github.com/etcdlock/etcdlock/embedtest"
	"github.com/etcdlock/etcdlock/internal/locktest"
)

// TestServeOneQueue: two HTTP holders and a Go Mutex of one name wait in
// one FIFO queue: the second HTTP holder waits, a Go Lock made after it
// waits behind it, and each close grants the next with a higher token.
// Each HTTP hold shows its own identity.
func TestServeOneQueue(t *testing.T) {
	srv := startServer(t, nil, Config{})
	cli := srv.cli
	name := embedtest.UniqueName(t, "serve")
	a, ga := srv.Hold(t, map[string]any{"name": name, "identity": "client-a"})
	type opened struct {
		st    *servetest.Stream
		first map[string]any
	}
	bch := make(chan opened, 1)
	go func() {
		st, _, first := srv.Open(t, "/v1/hold", map[string]any{"name": name, "identity": "client-b"})
		bch <- opened{st, first}
	}()
	locktest.WaitState(t, cli, name, "client-b waiting", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 1 })
	goLock := make(chan *etcdlock.Lock, 1)
	go func() {
		l, err := etcdlock.NewMutex(locktest.OpenSession(t, cli, etcdlock.WithIdentity("go")), name).Lock(embedtest.Context(t, long))
		if err != nil {
			t.Error(err)
		}
		goLock <- l
	}()
	st := locktest.WaitState(t, cli, name, "go waiting", func(st *etcdlock.LockState) bool { return len(st.Waiters) == 2 })
	if got := identities(append([]etcdlock.Entry{*st.Holder}, st.Waiters...)); strings.Join(got, ",") != "client-a,client-b,go" {
		t.Fatalf("queue %v; want client-a holding, then client-b, then go", got)
	}
	a.Close()
	b := <-bch
	if b.first["event"] != "granted" || servetest.TokenOf(t, b.first) <= servetest.TokenOf(t, ga) {
		t.Fatalf("second holder: %v after %v", b.first, ga)
	}
	select {
	case <-goLock:
		t.Fatal("the Go Lock was granted before the HTTP holder ahead of it released")
	case <-time.After(100 * time.Millisecond): // (asserting that it still waits)
	}
	b.st.Close()
	l := <-goLock
	if l == nil || int64(l.Token()) <= servetest.TokenOf(t, b.first) {
		t.Fatalf("Go Lock after the HTTP holders: %v", l)
	}
	_ = l.Unlock(embedtest.Context(t, long))
}

// TestServeHoldsThroughMemberLoss: the etcd leader is killed while HTTP
// clients hold: after the election the holds are still granted and alive.
func TestServeHoldsThroughMemberLoss(t *testing.T) {
	t.Parallel() // touches only its own names, links and clusters; mostly waits
	c := embedtest.Start(t)
	srv := startServer(t, c, Config{})
	names := []string{embedtest.UniqueName(t, "serve"), embedtest.UniqueName(t, "serve")}
	var streams []*servetest.Stream
	for _, n := range names {
		st, _ := srv.Hold(t, map[string]any{"name": n, "ttl": "10s"})
		streams = append(streams, st)
	}
	ctx := embedtest.Context(t, long)
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Alive lines keep coming for longer than the TTL, and no lost line.
	for _, st := range streams {
		for time.Since(killed) < 11*time.Second {
			m := st.Next(t, "alive")
			if m == nil {
				t.Fatal("a hold's stream ended after the leader was killed")
			}
		}
	}
	cli := c.TestClient(t)
	for _, n := range names {
		st, err := etcdlock.Describe(ctx, cli, n)
		if err != nil || st.Holder == nil {
			t.Fatalf("%s after the leader was killed: %+v %v", n, st, err)
		}
	}
}
