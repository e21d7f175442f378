package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// logger returns the logger of the client and the library: debug messages
// on stderr with --debug, nothing otherwise.
func (a *app) logger() *zap.Logger {
	if !a.conn.debug {
		return zap.NewNop()
	}
	enc := zap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(zapcore.AddSync(a.stderr)), zapcore.DebugLevel)
	return zap.New(core)
}

// connect builds a client and checks that the cluster answers within
// --dial-timeout. Its errors are exitErrors with code 1.
func (a *app) connect(ctx context.Context) (*clientv3.Client, error) {
	eps, err := a.conn.endpointList()
	if err != nil {
		return nil, exitf(exitUsage, "%v", err)
	}
	return a.connectTo(ctx, eps)
}

// connectTo is connect to eps (a member cluster's, as a sharded
// deployment's root records them) with the flags' TLS and credentials.
func (a *app) connectTo(ctx context.Context, eps []string) (*clientv3.Client, error) {
	c := &a.conn
	var err error
	cfg := clientv3.Config{
		Endpoints:            eps,
		DialTimeout:          c.dialTimeout,
		DialKeepAliveTime:    2 * time.Second, // etcdctl's defaults
		DialKeepAliveTimeout: 6 * time.Second,
		Logger:               a.logger(),
	}
	cfg.TLS, err = c.tlsConfig(eps)
	if err != nil {
		return nil, exitf(exitUsage, "TLS: %v", err)
	}
	// Before the client: with a user, clientv3.New logs in and would turn
	// a TLS failure into a timeout.
	if err := preflight(ctx, eps, cfg.TLS, c.dialTimeout); err != nil {
		return nil, c.unavailable(err, c.failed(ctx, eps, err))
	}
	if c.user != "" {
		cfg.Username, cfg.Password, err = c.credentials(a.stdin, a.stderr)
		if err != nil {
			return nil, exitf(exitUsage, "%v", err)
		}
	}
	scrubPasswordEnv()
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, c.connectError(eps, err)
	}
	if err := probe(ctx, cli, eps, c.dialTimeout); err != nil {
		_ = cli.Close() // the probe's error is the one to report
		return nil, c.unavailable(err, c.failed(ctx, eps, err))
	}
	return cli, nil
}

// unavailable is a failure to reach a working etcd that run and elect wait
// out within --wait: no member accepts a connection or answers in time, or
// those that answer have no leader. Error and Unwrap give the error to
// report when not waiting.
type unavailable struct {
	err    error  // an exitError
	reason string // what is waited for, for stderr
}

func (u *unavailable) Error() string { return u.err.Error() }
func (u *unavailable) Unwrap() error { return u.err }

// errNoLeader: the members that answered have no leader.
var errNoLeader = errors.New("etcd answered but has no leader (quorum lost?)")

// unavailable returns report, as an *unavailable when cause (connect's or
// openSession's failure) is one that waiting can end: a refused connection,
// no answer in time, no leader. An unknown host, TLS, credentials or a
// server that is not etcd are not.
func (c *connFlags) unavailable(cause, report error) error {
	reason := ""
	switch {
	case errors.Is(cause, errNoLeader), errors.Is(cause, rpctypes.ErrNoLeader), errors.Is(cause, rpctypes.ErrGRPCNoLeader):
		reason = errNoLeader.Error()
	case errors.Is(cause, syscall.ECONNREFUSED):
		reason = "etcd refuses connections (down?)"
	case isTimeout(cause), errors.Is(cause, syscall.ECONNRESET), errors.Is(cause, syscall.EHOSTUNREACH),
		errors.Is(cause, syscall.ENETUNREACH), status.Code(cause) == codes.Unavailable:
		reason = "etcd does not answer"
	default:
		return report
	}
	return &unavailable{err: report, reason: reason}
}

// failed is connect's error for err: ctx's cause if ctx ended (a signal,
// say), else connectError's.
func (c *connFlags) failed(ctx context.Context, eps []string, err error) error {
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return c.connectError(eps, err)
}

// connectError tells an etcd that cannot be reached from one that answered
// with an error (bad credentials, say).
func (c *connFlags) connectError(eps []string, err error) error {
	at := strings.Join(eps, ",")
	var answer rpctypes.EtcdError
	switch code := status.Code(err); {
	case errors.Is(err, errNoLeader):
		return exitf(exitUsage, "etcd at %s: %v", at, err)
	case errors.Is(err, context.DeadlineExceeded):
		return exitf(exitUsage, "cannot reach etcd at %s: no answer within %v (--dial-timeout)%s", at, c.dialTimeout, c.defaultHint(at))
	case !errors.As(err, &answer) && (code == codes.Unavailable || code == codes.Unknown):
		return exitf(exitUsage, "cannot reach etcd at %s: %s%s", at, errText(err), c.defaultHint(at))
	}
	msg := strings.TrimPrefix(errText(err), "etcdserver: ")
	if c.user == "" && strings.Contains(msg, "user name is empty") {
		msg += " (the cluster has authentication on: give --user)"
	}
	return exitf(exitUsage, "etcd at %s: %s", at, msg)
}

// defaultHint is what connectError adds when at, which cannot be reached,
// is the default endpoint that nobody asked for.
func (c *connFlags) defaultHint(at string) string {
	if !c.defaultEndpoints || at != defaultEndpoint {
		return ""
	}
	return fmt.Sprintf("; %s is the default endpoint: give the cluster's with --endpoints or $ETCDCTL_ENDPOINTS", defaultEndpoint)
}

// probe asks every endpoint for its status at once and returns nil as soon
// as one answers with a leader; else errNoLeader if one answered without,
// else the first endpoint's error once all failed or the timeout passed.
// Status needs no permission (only a user, under auth), so it also works for
// users whose role covers only their own lock names.
func probe(ctx context.Context, cli *clientv3.Client, eps []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var noLeader atomic.Bool
	err := firstSuccess(eps, func(ep string) error {
		resp, err := cli.Status(ctx, ep)
		if err == nil && resp.Leader == 0 {
			noLeader.Store(true)
			return errNoLeader
		}
		return err
	})
	if err != nil && noLeader.Load() {
		return errNoLeader
	}
	return err
}

// firstSuccess runs check on every endpoint at once and returns nil as soon
// as one passes, else the first endpoint's error once all failed.
func firstSuccess(eps []string, check func(ep string) error) error {
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(eps))
	for i, ep := range eps {
		go func() { results <- result{i, check(ep)} }()
	}
	errs := make([]error, len(eps))
	for range eps {
		r := <-results
		if r.err == nil {
			return nil
		}
		errs[r.i] = r.err
	}
	return errs[0]
}

// withClient connects and runs body with a context bounded by
// --command-timeout: the frame of status, ls and break.
func (a *app) withClient(body func(ctx context.Context, cli *clientv3.Client) error) error {
	cli, err := a.connect(context.Background())
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), a.conn.commandTimeout)
	defer cancel()
	return body(ctx, cli)
}
