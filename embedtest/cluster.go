package embedtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// ErrClosed is returned by the methods of a Cluster (and of its Members)
// that need a live cluster once Close was called.
var ErrClosed = errors.New("embedtest: cluster closed")

// Client settings of every client made by a Cluster (see ClientConfig).
const (
	clientDialTimeout      = 5 * time.Second
	clientKeepAliveTime    = 2 * time.Second
	clientKeepAliveTimeout = 2 * time.Second
)

// walSegmentSize caps the size etcd preallocates on disk for each WAL file
// (64 MB by default, twice per member: the live segment and the next one).
const walSegmentSize = 4 << 20

var walOnce sync.Once

// shrinkWAL lowers etcd's process-wide WAL segment size once, before the
// first member starts, so that a 3-member cluster takes megabytes of disk
// (or of RAM, when the temporary directory is a tmpfs) instead of 400 MB.
func shrinkWAL() {
	walOnce.Do(func() {
		if wal.SegmentSizeBytes > walSegmentSize {
			wal.SegmentSizeBytes = walSegmentSize
		}
	})
}

// Cluster is a real etcd cluster running inside the test process: one
// go.etcd.io/etcd/server/v3/embed server per member, each behind stable TCP
// proxies on 127.0.0.1. Build it with Start (in a test) or New (anywhere
// else). All methods are safe for concurrent use.
type Cluster struct {
	cfg     config
	dir     string
	ownDir  bool // dir is a temporary directory we made: remove it on Close
	token   string
	members []*Member
	sec     securityFiles // WithTLS, WithAuth, WithJWT (security.go)

	// opMu serialises Kill, Restart, Isolate, Heal and Close.
	opMu sync.Mutex

	mu     sync.Mutex
	closed bool
	links  map[*Link]struct{}

	done      chan struct{} // closed by Close
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Start starts a cluster for the test t and registers its Close with
// t.Cleanup (a Close error fails the test). It calls t.Fatal when the
// cluster cannot start (within a minute, or when the test's context ends).
// Call it from the test's goroutine.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := New(ctx, opts...)
	if err != nil {
		t.Fatalf("embedtest.Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("embedtest: close cluster: %v", err)
		}
	})
	return c
}

// New starts a cluster and returns once every member has joined and a
// leader is elected. ctx bounds the start only; the caller must Close the
// cluster. Bad options give an error wrapping ErrInvalidOption. Members
// start concurrently; with the default options a 3-member cluster starts in
// about a second, even under -race. Clusters never share ports or
// directories, so New may be called concurrently (and from parallel test
// binaries).
func New(ctx context.Context, opts ...Option) (*Cluster, error) {
	cfg, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		cfg:   cfg,
		links: make(map[*Link]struct{}),
		done:  make(chan struct{}),
	}
	if err := c.start(ctx); err != nil {
		_ = c.Close() // stops what started, removes a temporary directory
		return nil, err
	}
	return c, nil
}

// start prepares the data directory, starts every member and waits for a
// leader.
func (c *Cluster) start(ctx context.Context) error {
	shrinkWAL()
	var tok [8]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return fmt.Errorf("embedtest: cluster token: %w", err)
	}
	c.token = "embedtest-" + hex.EncodeToString(tok[:])

	if err := c.makeDirs(); err != nil {
		return err
	}
	if err := c.prepareSecurity(); err != nil {
		return err
	}
	if err := c.newMembers(); err != nil {
		return err
	}

	// Start every member at once: none can finish joining without a quorum.
	c.opMu.Lock()
	errs := make([]error, len(c.members))
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.start(embed.ClusterStateFlagNew)
		}()
	}
	wg.Wait()
	c.applyCuts() // the members learnt their IDs concurrently
	c.opMu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, m := range c.members {
		if err := m.WaitReady(ctx); err != nil {
			return fmt.Errorf("embedtest: start: %w", err)
		}
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		return fmt.Errorf("embedtest: start: %w", err)
	}
	if c.cfg.auth {
		return c.enableAuth(ctx)
	}
	return nil
}

// makeDirs makes the cluster's data directory (a temporary one unless
// WithDir).
func (c *Cluster) makeDirs() error {
	if c.cfg.dir == "" {
		dir, err := os.MkdirTemp("", "embedtest-")
		if err != nil {
			return fmt.Errorf("embedtest: data directory: %w", err)
		}
		c.dir, c.ownDir = dir, true
		return nil
	}
	c.dir = c.cfg.dir
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return fmt.Errorf("embedtest: data directory: %w", err)
	}
	return nil
}

// newMembers makes the members, each in an empty directory of its own.
func (c *Cluster) newMembers() error {
	for i := range c.cfg.members {
		name := "m" + strconv.Itoa(i)
		dir := filepath.Join(c.dir, name)
		if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
			return fmt.Errorf("embedtest: data directory %s is not empty", dir)
		}
		m, err := newMember(c, name, dir)
		if err != nil {
			return err
		}
		c.members = append(c.members, m)
	}
	return nil
}

// Dir returns the directory that holds the members' data (one subdirectory
// per member, named after it).
func (c *Cluster) Dir() string { return c.dir }

// Endpoints returns the client URLs of all members, in the order of
// Members, as "http://127.0.0.1:port" ("https://..." under WithTLS). They
// stay valid across Kill and Restart until Close.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.Endpoint()
	}
	return eps
}

// ClientConfig returns the configuration of the clients Client makes: all
// Endpoints, a logger that discards everything, a 5 s dial timeout, 2 s
// keepalive time and timeout (a dead connection is noticed within about
// 4 s) and a reconnect backoff capped at 1 s; under WithTLS, TLS set to
// ClientTLS(); under WithAuth, Username and Password of root. Use it to
// build a client with changed settings.
func (c *Cluster) ClientConfig() clientv3.Config { return c.ownClientConfig(c.Endpoints()) }

func clientConfig(endpoints []string) clientv3.Config {
	return clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          clientDialTimeout,
		DialKeepAliveTime:    clientKeepAliveTime,
		DialKeepAliveTimeout: clientKeepAliveTimeout,
		Logger:               zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{
					BaseDelay:  50 * time.Millisecond,
					Multiplier: 1.6,
					Jitter:     0.2,
					MaxDelay:   time.Second,
				},
				MinConnectTimeout: clientDialTimeout,
			}),
		},
	}
}

// Client returns a new client to all members (see ClientConfig): over TLS
// under WithTLS, logged in as root under WithAuth. The caller closes it.
func (c *Cluster) Client() (*clientv3.Client, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	cli, err := clientv3.New(c.ClientConfig())
	if err != nil {
		return nil, fmt.Errorf("embedtest: client: %w", err)
	}
	return cli, nil
}

// Members returns the members, in a fixed order (m0, m1, ...). The slice is
// a copy; the Members are shared.
func (c *Cluster) Members() []*Member {
	return append([]*Member(nil), c.members...)
}

// Member returns the member with the given name, or nil.
func (c *Cluster) Member(name string) *Member {
	for _, m := range c.members {
		if m.name == name {
			return m
		}
	}
	return nil
}

// Leader returns the member that reports itself leader among the running,
// non-isolated members (the one with the highest raft term should two
// briefly do so), or nil when there is none. It does not wait: see
// WaitLeader.
func (c *Cluster) Leader() *Member {
	var (
		leader *Member
		term   uint64
	)
	for _, m := range c.members {
		e, id, isolated := m.state()
		if e == nil || isolated {
			continue
		}
		if s := e.Server; uint64(s.Leader()) == id && s.Term() >= term {
			leader, term = m, s.Term()
		}
	}
	return leader
}

// agreedLeader returns Leader if a majority of all members (running and not
// isolated) report it as their leader.
func (c *Cluster) agreedLeader() *Member {
	l := c.Leader()
	if l == nil {
		return nil
	}
	lid := types.ID(l.ID())
	votes := 0
	for _, m := range c.members {
		e, _, isolated := m.state()
		if e != nil && !isolated && e.Server.Leader() == lid {
			votes++
		}
	}
	if votes < len(c.members)/2+1 {
		return nil
	}
	return l
}

// WaitLeader polls until a leader exists that a majority of the members
// agree on, and returns it. It returns ctx's error (wrapped) when ctx ends
// first, and ErrClosed once the cluster is closed.
func (c *Cluster) WaitLeader(ctx context.Context) (*Member, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if c.isClosed() {
			return nil, ErrClosed
		}
		if l := c.agreedLeader(); l != nil {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("embedtest: wait for leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Close stops every member at once (as Kill does, so without a graceful
// drain), closes all proxies and links and the connections through them,
// waits for every goroutine the package started, and removes the data
// directory unless it was given with WithDir. Clients made by the cluster
// are not closed: their owners close them (they fail fast meanwhile).
// Close is idempotent: later calls return the first call's result.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Cluster) close() error {
	c.opMu.Lock()
	c.mu.Lock()
	c.closed = true
	links := make([]*Link, 0, len(c.links))
	for l := range c.links {
		links = append(links, l)
	}
	c.mu.Unlock()
	close(c.done)

	for _, l := range links {
		_ = l.Close()
	}
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = m.kill() // ErrNotRunning for a killed member is fine
			m.clientProxy.close()
			m.peerProxy.close()
		}()
	}
	wg.Wait()
	c.opMu.Unlock()
	c.wg.Wait()

	if c.ownDir {
		if err := os.RemoveAll(c.dir); err != nil {
			return fmt.Errorf("embedtest: remove data: %w", err)
		}
	}
	return nil
}

func (c *Cluster) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// applyCuts makes raft traffic between every pair of running members flow,
// or not when either is isolated. The caller holds c.opMu.
func (c *Cluster) applyCuts() {
	for _, a := range c.members {
		ea, _, aIso := a.state()
		if ea == nil {
			continue
		}
		for _, b := range c.members {
			_, bid, bIso := b.state()
			if b == a || bid == 0 {
				continue
			}
			if aIso || bIso {
				ea.Server.CutPeer(types.ID(bid))
			} else {
				ea.Server.MendPeer(types.ID(bid))
			}
		}
	}
}
