package etcdlock_test

// Regression tests for writes that are applied late: a request held back on
// a cut network path and delivered after the library gave up on it and
// moved on (freed the key's name, reused it). Each test makes its own
// cluster and a client whose endpoints reach two followers, each through a
// Link of its own, so that one path can be cut while the other works (with
// no leader among its endpoints, the session's keeper lends no leader
// connection: every request uses the balanced connection). The
// client's balanced connection takes its connected paths in turn, which
// lets the test steer the library's next request onto a path (steer).
//
// A request the client gave up on is followed on its connection by its
// cancellation (RST_STREAM); delivered together, the member may or may not
// start the request before it sees the cancellation. pulse delivers the
// first bytes a path held back and holds the rest, so the test can arrange
// for a held request to arrive alone, long after its cancellation was sent,
// as a request delayed in the network can.

import (
	"context"
	"testing"
	"time"

	"github.com/etcdlock/etcdlock"
	"github.com/etcdlock/etcdlock/embedtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

const (
	methodTxn    = "/etcdserverpb.KV/Txn"
	methodDelete = "/etcdserverpb.KV/DeleteRange"
	// lateTTL is long enough for a session to outlive the cuts of these
	// tests without a keepalive stall (the stall limit is TTL/5).
	lateTTL = 30 * time.Second
)

// paths is a client whose i-th endpoint reaches members[i] through links[i]
// only (AutoSyncInterval 0: it never learns the members' own endpoints).
type paths struct {
	cli   *clientv3.Client
	links []*embedtest.Link
}

func newPaths(t *testing.T, c *embedtest.Cluster, members ...*embedtest.Member) *paths {
	t.Helper()
	p := &paths{}
	var eps []string
	for _, m := range members {
		l, err := c.NewLink()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		idx := -1
		for i, cm := range c.Members() {
			if cm == m {
				idx = i
			}
		}
		p.links = append(p.links, l)
		eps = append(eps, l.Endpoints()[idx])
	}
	cfg := c.ClientConfig()
	cfg.Endpoints = eps
	cfg.AutoSyncInterval = 0
	// Fixed flow-control windows turn off gRPC's bandwidth probes: a probe
	// ping written after a cut would be what the path first holds back.
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(1<<20))
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	p.cli = cli
	return p
}

// restoreAll restores every link (registered as a cleanup after the
// sessions, so it runs before they close and their revokes get through).
func (p *paths) restoreAll() {
	for _, l := range p.links {
		l.Restore()
	}
}

// writes counts the writes (Txn, DeleteRange) member m has received.
func writes(m *embedtest.Member) int64 { return m.Calls(methodTxn) + m.Calls(methodDelete) }

// probe sends a serializable Get over cli with a short timeout: true if it
// was answered (the balancer picked an open path), false if it timed out (it
// picked a cut one; the Get is held there, harmless).
func probe(cli *clientv3.Client) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := cli.Get(ctx, "latewrite/probe", clientv3.WithSerializable())
	return err == nil
}

// pulse delivers what each connection through l first held back since l
// was cut, and holds back the rest: it restores l and cuts it again at once.
// A link's proxy forwards the bytes of one read from a connection per
// restore; the read that follows, with whatever the client wrote later,
// waits for the next restore.
func pulse(l *embedtest.Link) {
	l.Restore()
	l.Cut()
}

// steer leaves cli's round-robin balancer, over exactly two connected paths
// of which one is cut, so that its next request goes over the cut path
// (toCut) or the open one. The balancer takes the paths in turn: a probe
// that times out went over the cut path, so the next request goes over the
// open one, and vice versa. steer stops after one probe of each kind, the
// last one over the path the next request must not take: so the cut path
// is known to be in the rotation, and the open one has just been answered
// (its client sends no keepalive ping for a while, a ping that could be
// the first thing the open path holds back if it is cut next).
func steer(t *testing.T, cli *clientv3.Client, toCut bool) {
	t.Helper()
	prev := false
	for i := 0; i < 10; i++ {
		ok := probe(cli)
		if i > 0 && ok != prev && ok == toCut {
			return
		}
		prev = ok
	}
	t.Fatal("cannot steer the balancer: the cut path is not in its rotation")
}

// awaitPathDown waits until cli's balancer no longer uses a cut path (the
// client's keepalive closed its connection, and a new one cannot complete
// its handshake while the path is cut): two probes in a row are answered.
func awaitPathDown(t *testing.T, cli *clientv3.Client, d time.Duration) {
	t.Helper()
	ok := 0
	waitFor(t, d, "the cut path to leave the balancer's rotation", func() bool {
		if probe(cli) {
			ok++
		} else {
			ok = 0
		}
		return ok >= 2
	})
}

// deliverHeld pulses l until member m has received a write more than
// before (at most three pulses, two seconds each): the first thing l held
// back was a request, or the first part of one (gRPC may write a request's
// headers and its message apart), whose rest the next pulse delivers. It
// reports whether a write arrived.
func deliverHeld(l *embedtest.Link, m *embedtest.Member, before int64) bool {
	for i := 0; i < 3; i++ {
		pulse(l)
		if awaitDelivery(m, before, 2*time.Second) {
			return true
		}
	}
	return false
}

// awaitDelivery waits (at most d) until member m has received a write more
// than before: the held-back bytes of a restored link reached it. It reports
// whether that was seen.
func awaitDelivery(m *embedtest.Member, before int64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for writes(m) <= before {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// followersOf returns the members other than leader.
func followersOf(c *embedtest.Cluster, leader *embedtest.Member) []*embedtest.Member {
	var out []*embedtest.Member
	for _, m := range c.Members() {
		if m != leader {
			out = append(out, m)
		}
	}
	return out
}

// grant is what the tests need of a Lock or a Leadership.
type grant struct {
	key     string
	token   etcdlock.Token
	ctx     context.Context // the grant's Context (its monitor started)
	release func(context.Context) error
}

// recipe acquires a name the way one of the package's recipes does.
type recipe struct {
	what    string // for messages: "lock", "leadership"
	acquire func(ctx context.Context, s *etcdlock.Session, name string) (grant, error)
}

func lockGrant(l *etcdlock.Lock) grant { return grant{l.Key(), l.Token(), l.Context(), l.Unlock} }

var (
	mutexLock = recipe{"lock", func(ctx context.Context, s *etcdlock.Session, name string) (grant, error) {
		l, err := etcdlock.NewMutex(s, name).Lock(ctx)
		if err != nil {
			return grant{}, err
		}
		return lockGrant(l), nil
	}}
	mutexTryLock = recipe{"lock", func(ctx context.Context, s *etcdlock.Session, name string) (grant, error) {
		l, err := etcdlock.NewMutex(s, name).TryLock(ctx)
		if err != nil {
			return grant{}, err
		}
		return lockGrant(l), nil
	}}
	campaign = recipe{"leadership", func(ctx context.Context, s *etcdlock.Session, name string) (grant, error) {
		l, err := etcdlock.NewElection(s, name).Campaign(ctx, s.Identity())
		if err != nil {
			return grant{}, err
		}
		return grant{l.Key(), l.Token(), l.Context(), l.Resign}, nil
	}}
)

// mustAcquire acquires name with r on s or fails the test.
func (r recipe) mustAcquire(t *testing.T, s *etcdlock.Session, name string) grant {
	t.Helper()
	g, err := r.acquire(embedtest.Context(t, 30*time.Second), s, name)
	if err != nil {
		t.Fatalf("%s %q: %v", r.what, name, err)
	}
	return g
}

// reacquire acquires name with r on s until it gets the key name want (a
// name the session used before and must free first), for at most d; it
// returns the last grant either way and whether its key is want. It polls:
// when a session frees a name is not observable.
func (r recipe) reacquire(t *testing.T, s *etcdlock.Session, name, want string, d time.Duration) (grant, bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		g := r.mustAcquire(t, s, name)
		if g.key == want || time.Now().After(deadline) {
			return g, g.key == want
		}
		if err := g.release(embedtest.Context(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
