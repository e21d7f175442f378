package embedtest

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// ErrInvalidOption is wrapped by the error New (and Start, through t.Fatal)
// reports when an Option was given a value it cannot honour. Options never
// silently replace a bad value with a default.
var ErrInvalidOption = errors.New("embedtest: invalid option")

// Defaults used when no Option says otherwise.
const (
	// DefaultMembers is the number of members of a cluster.
	DefaultMembers = 3
	// DefaultTick is the raft heartbeat interval of every member.
	DefaultTick = 100 * time.Millisecond
	// DefaultElection is the raft election timeout of every member.
	DefaultElection = 1000 * time.Millisecond

	// maxElection is etcd's own upper bound for the election timeout.
	maxElection = 50 * time.Second
)

// config is what the Options of New build.
type config struct {
	members  int
	dir      string // "" = a fresh temporary directory, removed on Close
	tick     time.Duration
	election time.Duration
	logger   *zap.Logger
	fsync    bool
	// maxTxnOps is etcd's --max-txn-ops; 0 = etcd's default.
	maxTxnOps uint
	// maxRequestBytes is etcd's --max-request-bytes; 0 = etcd's default.
	maxRequestBytes uint

	// security (security.go)
	tls          bool
	auth         bool
	rootPassword string
	tokenTTL     time.Duration // 0 = etcd's default
	jwt          bool
}

func defaultConfig() config {
	return config{
		members:  DefaultMembers,
		tick:     DefaultTick,
		election: DefaultElection,
		logger:   zap.NewNop(),
	}
}

// Option configures a Cluster built by New or Start. An Option reports a bad
// value as an error wrapping ErrInvalidOption when it is applied; building an
// Option never panics. Options are plain values and safe to share between
// goroutines and clusters.
type Option func(*config) error

// applyOptions applies opts over the defaults.
func applyOptions(opts []Option) (config, error) {
	cfg := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: option %d is nil", ErrInvalidOption, i)
		}
		if err := o(&cfg); err != nil {
			return config{}, err
		}
	}
	return cfg, nil
}

// WithMembers sets the number of members (default 3). n must be at least 1.
func WithMembers(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: WithMembers(%d): need at least one member", ErrInvalidOption, n)
		}
		c.members = n
		return nil
	}
}

// WithDir makes the cluster keep its data under dir (one subdirectory per
// member, named after the member) instead of a fresh temporary directory.
// The directory is created if needed and is not removed by Close. A member
// subdirectory that already holds files makes New fail: every cluster starts
// from empty data. dir must not be empty; a relative dir is made absolute.
func WithDir(dir string) Option {
	return func(c *config) error {
		if dir == "" {
			return fmt.Errorf("%w: WithDir: empty directory", ErrInvalidOption)
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fmt.Errorf("%w: WithDir(%q): %w", ErrInvalidOption, dir, err)
		}
		c.dir = abs
		return nil
	}
}

// WithTick sets the raft heartbeat interval (tick) and election timeout of
// every member (default 100ms and 1000ms). Both must be whole milliseconds,
// tick > 0, election >= 5*tick and election <= 50s (etcd's own limits).
// Short ticks make leaders churn under -race on small machines: never go
// below 50ms / 500ms in CI. The minimum lease TTL etcd
// grants is about 1.5 times the election timeout.
func WithTick(tick, election time.Duration) Option {
	return func(c *config) error {
		switch {
		case tick <= 0:
			return fmt.Errorf("%w: WithTick: tick %v must be positive", ErrInvalidOption, tick)
		case tick%time.Millisecond != 0 || election%time.Millisecond != 0:
			return fmt.Errorf("%w: WithTick(%v, %v): durations must be whole milliseconds", ErrInvalidOption, tick, election)
		case election < 5*tick:
			return fmt.Errorf("%w: WithTick(%v, %v): election must be at least 5 ticks", ErrInvalidOption, tick, election)
		case election > maxElection:
			return fmt.Errorf("%w: WithTick(%v, %v): election must be at most %v", ErrInvalidOption, tick, election, maxElection)
		}
		c.tick, c.election = tick, election
		return nil
	}
}

// WithLogger sets the logger of the etcd members (each member logs with a
// "member" field naming it). The default discards everything. l must not be
// nil. Clients made by the Cluster always log nothing.
func WithLogger(l *zap.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		c.logger = l
		return nil
	}
}

// WithFsync turns fsync of the members' write-ahead logs on or off (default
// off: tests run faster and a crash of the whole test process loses nothing
// a test needs). Benchmarks that want a production-like commit cost turn it
// on.
func WithFsync(on bool) Option {
	return func(c *config) error {
		c.fsync = on
		return nil
	}
}

// WithMaxTxnOps sets every member's limit on the operations of one Txn
// (etcd's --max-txn-ops; default 128). n must be at least 1.
func WithMaxTxnOps(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: max txn ops %d < 1", ErrInvalidOption, n)
		}
		c.maxTxnOps = uint(n)
		return nil
	}
}

// WithMaxRequestBytes sets every member's limit on the size of one request
// (etcd's --max-request-bytes; default 1.5 MiB). n must be at least 1.
func WithMaxRequestBytes(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: max request bytes %d < 1", ErrInvalidOption, n)
		}
		c.maxRequestBytes = uint(n)
		return nil
	}
}

// WithTLS makes every member serve its clients over TLS only, with mutual
// authentication. New generates, fresh for each cluster, a certificate
// authority and two certificates signed by it (ECDSA P-256 keys, valid from
// a few minutes before the start for 24 hours; nothing is read from or
// committed to the source tree), written as PEM files under Dir()/tls:
//
//   - ca.crt: the CA that signs both certificates;
//   - server.crt, server.key: the members' certificate, for the IP
//     addresses 127.0.0.1 and ::1 and the DNS name localhost;
//   - client.crt, client.key: a client certificate, with no common name.
//
// Members listen on and advertise https:// client URLs (Endpoints,
// Member.Endpoint and Link.Endpoints return them) and refuse clients that do
// not present a certificate signed by the CA. Clients made by the Cluster
// (Client, ClientAs, FlakyClient, Member.Client, ClientConfig) use ClientTLS;
// TLSFiles gives the file names, for etcdctl or a CLI under test. Peer
// traffic between members stays plain http (it never leaves the test
// process's loopback proxies).
//
// With client certificate authentication on, etcd takes the common name of a
// verified client certificate as the user name of a request that carries no
// auth token. The generated client certificate has none, so under WithAuth a
// client without a user name is refused ("user name is empty" or
// "permission denied"), as it would be without TLS.
func WithTLS() Option {
	return func(c *config) error {
		c.tls = true
		return nil
	}
}

// WithAuth turns etcd authentication on once the cluster is up: New creates
// the role root, the user root with rootPassword and grants it root, then
// enables auth, before it returns. Client, FlakyClient, Member.Client and
// ClientConfig then log in as root; ClientAs logs in as another user (create
// users and roles with a root client). rootPassword must not be empty.
//
// Passwords of users added to the cluster are hashed with bcrypt's minimum
// cost (4), with or without WithAuth, so that logins stay fast under -race:
// a test cluster is not about the strength of password hashing.
func WithAuth(rootPassword string) Option {
	return func(c *config) error {
		if rootPassword == "" {
			return fmt.Errorf("%w: WithAuth: empty root password", ErrInvalidOption)
		}
		c.auth, c.rootPassword = true, rootPassword
		return nil
	}
}

// WithAuthTokenTTL sets the lifetime of the auth tokens the members issue
// (etcd's default: 300 s for simple tokens, 5 min for JWT). Simple tokens
// (the default kind) expire d after their last use on each member
// (embed.Config.AuthTokenTTL); JWT tokens (WithJWT) expire d after they were
// issued, however much they are used. d must be a positive whole number of
// seconds. It takes effect whenever auth is on, with WithAuth or enabled by
// the test itself.
func WithAuthTokenTTL(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Second || d%time.Second != 0 {
			return fmt.Errorf("%w: WithAuthTokenTTL(%v): must be a positive whole number of seconds", ErrInvalidOption, d)
		}
		c.tokenTTL = d
		return nil
	}
}

// WithJWT makes the members issue signed JWT auth tokens instead of simple
// ones. New generates a fresh ECDSA P-256 key pair under Dir()/tls (jwt.key,
// jwt.pub) and gives every member
// "jwt,pub-key=...,priv-key=...,sign-method=ES256[,ttl=...]" as its
// embed.Config.AuthToken (the ttl from WithAuthTokenTTL). Like
// WithAuthTokenTTL it takes effect whenever auth is on. The cluster's
// directory (WithDir) must then not contain ',' or '=', which etcd's option
// syntax cannot carry.
func WithJWT() Option {
	return func(c *config) error {
		c.jwt = true
		return nil
	}
}
