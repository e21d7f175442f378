package embedtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

var (
	// ErrNotRunning is wrapped by the error of Kill (and of WaitReady) for a
	// member that is not running.
	ErrNotRunning = errors.New("embedtest: member is not running")
	// ErrRunning is wrapped by the error of Restart for a member that is
	// running.
	ErrRunning = errors.New("embedtest: member is running")
)

// Member is one etcd member of a Cluster. Its client and peer addresses are
// stable TCP proxies that live as long as the Cluster; the etcd server
// behind them listens on fresh ports each time it starts. All methods are
// safe for concurrent use; Kill, Restart, Isolate and Heal of the members of
// one Cluster are serialised.
type Member struct {
	c           *Cluster
	name        string
	dir         string
	clientProxy *proxy
	peerProxy   *proxy
	calls       *callCounter
	gopts       []grpc.ServerOption

	mu       sync.Mutex
	etcd     *embed.Etcd // nil while killed
	id       uint64
	peerAddr string // the real peer listener of the running server
	isolated bool
}

func newMember(c *Cluster, name, dir string) (*Member, error) {
	m := &Member{c: c, name: name, dir: dir, calls: newCallCounter()}
	m.gopts = []grpc.ServerOption{
		// UnaryInterceptor and StreamInterceptor (not the Chain variants)
		// run before etcd's own chained interceptors, so every call that
		// reaches the member is counted, also those etcd then rejects.
		grpc.UnaryInterceptor(m.calls.unary),
		grpc.StreamInterceptor(m.calls.stream),
	}
	var err error
	if m.clientProxy, err = newProxy("", nil); err != nil {
		return nil, fmt.Errorf("embedtest: client proxy of %s: %w", name, err)
	}
	if m.peerProxy, err = newProxy("", nil); err != nil {
		m.clientProxy.close()
		return nil, fmt.Errorf("embedtest: peer proxy of %s: %w", name, err)
	}
	return m, nil
}

// Name returns the member's name ("m0", "m1", ...), its etcd member name.
func (m *Member) Name() string { return m.name }

// Endpoint returns the member's client URL, "http://127.0.0.1:port"
// ("https://..." under WithTLS). It stays the same across Kill and Restart.
func (m *Member) Endpoint() string { return m.c.scheme() + "://" + m.clientProxy.addr() }

// PeerURL returns the member's advertised peer URL,
// "http://127.0.0.1:port" (also under WithTLS: peer traffic stays plain).
// It stays the same across Kill and Restart.
func (m *Member) PeerURL() string { return m.peerProxy.url() }

// ID returns the member's etcd member ID (the same after Restart).
func (m *Member) ID() uint64 {
	_, id, _ := m.state()
	return id
}

// Running reports whether the member runs (it was not killed, or it was
// restarted since).
func (m *Member) Running() bool {
	e, _, _ := m.state()
	return e != nil
}

// Isolated reports whether the member is cut from its peers (Isolate was
// called and Heal was not called since).
func (m *Member) Isolated() bool {
	_, _, isolated := m.state()
	return isolated
}

// Server returns the running embedded etcd server, or nil while the member
// is killed. Use it to inspect (Server.Server.Leader(), Term(), ...); do not
// Close it: use Kill.
func (m *Member) Server() *embed.Etcd {
	e, _, _ := m.state()
	return e
}

// state returns the running server (nil while killed), the member ID and
// whether the member is isolated.
func (m *Member) state() (e *embed.Etcd, id uint64, isolated bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd, m.id, m.isolated
}

// Client returns a new client that talks to this member only, through its
// client proxy (it works again after a Restart), configured as by
// Cluster.ClientConfig. The caller closes it. It does not wait for a
// connection: a client to a killed member is fine. The exception is
// WithAuth: clientv3.New then logs in as root, so the member must answer
// within the 5 s dial timeout. After Cluster.Close it returns ErrClosed.
func (m *Member) Client() (*clientv3.Client, error) {
	if m.c.isClosed() {
		return nil, ErrClosed
	}
	cli, err := clientv3.New(m.c.ownClientConfig([]string{m.Endpoint()}))
	if err != nil {
		return nil, fmt.Errorf("embedtest: client of %s: %w", m.name, err)
	}
	return cli, nil
}

// Calls returns how many gRPC requests this member received for the full
// method name, for example "/etcdserverpb.KV/Range" or
// "/etcdserverpb.KV/Txn": every unary call, plus every message received on
// a server stream (each keepalive request on
// "/etcdserverpb.Lease/LeaseKeepAlive", each create or cancel request on
// "/etcdserverpb.Watch/Watch"). Calls("") counts all methods. Calls are
// counted when they arrive, before etcd's own checks (a call rejected for
// want of a leader counts too); calls retried by a client count once per
// attempt. The counters live as long as the Cluster: they keep counting
// across Kill and Restart.
func (m *Member) Calls(method string) int64 { return m.calls.arrived.get(method) }

// Answered returns how many unary gRPC requests of the full method name
// this member has answered: those whose handler returned, with a result or
// an error (Answered("") counts all unary methods). Once Answered(method)
// reaches what Calls(method) was, every such request that had arrived by
// then has been handled: a write among them was applied, refused, or (when
// its handler returned an error such as a timeout) proposed to raft if at
// all; in a one-member cluster, a write sent after that is applied after
// it. Like Calls, it counts across Kill and Restart.
func (m *Member) Answered(method string) int64 { return m.calls.answered.get(method) }

// WaitReady waits until the running member has joined the cluster and
// serves client requests (after New, or after Restart once a quorum of
// members runs). It returns an error wrapping ErrNotRunning when the member
// is not running or is killed meanwhile, and ctx's error when ctx ends first.
func (m *Member) WaitReady(ctx context.Context) error {
	e := m.Server()
	if e == nil {
		return fmt.Errorf("embedtest: wait for %s: %w", m.name, ErrNotRunning)
	}
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case <-e.Server.StopNotify():
		return fmt.Errorf("embedtest: wait for %s: %w", m.name, ErrNotRunning)
	case <-ctx.Done():
		return fmt.Errorf("embedtest: wait for %s: %w", m.name, ctx.Err())
	}
}

// Kill crashes the member: it closes every connection through the member's
// client and peer proxies and stops forwarding (new connections are accepted
// and closed at once, like a dead port), drops the member's outgoing raft
// messages, then stops the server with EtcdServer.HardStop and releases it
// with Close. There is no leadership hand-off and no graceful drain; a
// request the server was still running when its storage closed fails with
// codes.Unavailable (rather than panicking in etcd). Kill
// returns when the server is fully stopped and its data can be reopened by
// Restart. Kill of a member that is not running returns an error wrapping
// ErrNotRunning; after Cluster.Close it returns ErrClosed.
func (m *Member) Kill() error { return m.op(m.kill) }

// op runs f as one of the cluster's operations (serialized by c.opMu),
// unless the cluster is closed: then it returns ErrClosed.
func (m *Member) op(f func() error) error {
	m.c.opMu.Lock()
	defer m.c.opMu.Unlock()
	if m.c.isClosed() {
		return ErrClosed
	}
	return f()
}

// kill does Kill; the caller holds c.opMu.
func (m *Member) kill() error {
	m.mu.Lock()
	e := m.etcd
	m.etcd = nil
	m.peerAddr = ""
	m.mu.Unlock()
	if e == nil {
		return fmt.Errorf("embedtest: kill %s: %w", m.name, ErrNotRunning)
	}
	m.calls.killing.Store(true) // before the count: see killedUnder
	m.calls.kills.Add(1)
	defer m.calls.killing.Store(false)
	m.clientProxy.setTarget("")
	m.peerProxy.setTarget("")
	// The member's own outgoing raft traffic (pipeline requests to the
	// peers' proxies) is cut too, so nothing leaves it from now on.
	for _, o := range m.c.members {
		if o != m {
			if id := o.ID(); id != 0 {
				e.Server.CutPeer(types.ID(id))
			}
		}
	}
	e.Server.HardStop()
	e.Close() // after HardStop: no leadership transfer, nothing left to drain
	return nil
}

// Restart starts a killed member again with the same name, data directory
// and advertised addresses (cluster state "existing"); its proxies resume
// forwarding to the new listeners. An isolated member stays isolated. Restart
// returns once the server is serving; it has then not necessarily caught up
// with the cluster (see WaitReady, or poll a serializable read). Restart of
// a running member returns an error wrapping ErrRunning; after Cluster.Close
// it returns ErrClosed.
func (m *Member) Restart() error {
	return m.op(func() error {
		if m.Running() {
			return fmt.Errorf("embedtest: restart %s: %w", m.name, ErrRunning)
		}
		return m.start(embed.ClusterStateFlagExisting)
	})
}

// Isolate cuts the member from every peer, both ways, as a network partition
// would, while its client port stays reachable: a client connected to it
// sees a member without a leader (after an election timeout). Raft messages
// between the member and each peer are dropped in both directions
// (EtcdServer.CutPeer on both sides), and the member's peer proxy closes
// every connection and refuses new ones, so peers cannot reach it at all
// (no forwarded lease renewals, no version probes). One gap remains: during
// its first election timeout an isolated follower may still forward a
// request (such as a lease renewal) to the leader over a new connection.
// Isolate of an isolated member does nothing. A killed member can be
// isolated: it stays cut when restarted. After Cluster.Close it returns
// ErrClosed.
func (m *Member) Isolate() error {
	return m.op(func() error {
		m.mu.Lock()
		m.isolated = true
		m.mu.Unlock()
		m.peerProxy.setTarget("")
		m.c.applyCuts()
		return nil
	})
}

// Heal undoes Isolate: raft messages flow again both ways and the peer proxy
// forwards again. Heal of a member that is not isolated does nothing. After
// Cluster.Close it returns ErrClosed.
func (m *Member) Heal() error {
	return m.op(func() error {
		m.mu.Lock()
		m.isolated = false
		peerAddr := m.peerAddr
		m.mu.Unlock()
		if peerAddr != "" {
			m.peerProxy.setTarget(peerAddr)
		}
		m.c.applyCuts()
		return nil
	})
}

// config builds the embed configuration of this member.
func (m *Member) config(state string) *embed.Config {
	c := m.c
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(c.cfg.logger.With(zap.String("member", m.name)))
	cfg.TickMs = uint(c.cfg.tick / time.Millisecond)
	cfg.ElectionMs = uint(c.cfg.election / time.Millisecond)
	cfg.UnsafeNoFsync = !c.cfg.fsync
	if c.cfg.maxRequestBytes > 0 {
		cfg.MaxRequestBytes = c.cfg.maxRequestBytes
	}
	if c.cfg.maxTxnOps > 0 {
		cfg.MaxTxnOps = c.cfg.maxTxnOps
	}
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "0" // off
	cfg.EnableGRPCGateway = false     // it would dial the listen address, port 0
	// Clients made here ping every 2 s; let user clients ping often too.
	cfg.GRPCKeepAliveMinTime = 100 * time.Millisecond
	cfg.GRPCAdditionalServerOptions = m.gopts

	local := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{{Scheme: c.scheme(), Host: local.Host}}
	cfg.ListenPeerUrls = []url.URL{local}
	cfg.AdvertiseClientUrls = []url.URL{{Scheme: c.scheme(), Host: m.clientProxy.addr()}}
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "http", Host: m.peerProxy.addr()}}

	// Security (security.go).
	cfg.BcryptCost = bcryptMinCost
	if c.cfg.tls {
		cfg.ClientTLSInfo = c.sec.serverTLS
	}
	if c.sec.authToken != "" {
		cfg.AuthToken = c.sec.authToken
	}
	if c.sec.authTokenTTL > 0 {
		cfg.AuthTokenTTL = c.sec.authTokenTTL
	}

	initial := make([]string, len(c.members))
	for i, o := range c.members {
		initial[i] = o.name + "=" + o.peerProxy.url()
	}
	cfg.InitialCluster = strings.Join(initial, ",")
	cfg.InitialClusterToken = c.token
	cfg.ClusterState = state
	return cfg
}

// start starts the member's server and points its proxies at it. The caller
// holds c.opMu (or owns the cluster exclusively, in New).
func (m *Member) start(state string) error {
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return fmt.Errorf("embedtest: start %s: %w", m.name, err)
	}
	e, err := embed.StartEtcd(m.config(state))
	if err != nil {
		return fmt.Errorf("embedtest: start %s: %w", m.name, err)
	}
	if len(e.Clients) == 0 || len(e.Peers) == 0 {
		e.Server.HardStop()
		e.Close()
		return fmt.Errorf("embedtest: start %s: server has no listeners", m.name)
	}
	clientAddr := e.Clients[0].Addr().String()
	peerAddr := e.Peers[0].Listener.Addr().String()

	m.mu.Lock()
	m.etcd = e
	m.id = uint64(e.Server.MemberID())
	m.peerAddr = peerAddr
	isolated := m.isolated
	m.mu.Unlock()

	m.clientProxy.setTarget(clientAddr)
	if !isolated {
		m.peerProxy.setTarget(peerAddr)
	}
	m.c.applyCuts()
	return nil
}
