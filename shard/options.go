package shard

// This file holds the options of New and Create.

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcdlock/etcdlock"
)

// Dialer returns a client of a member cluster, given its id and endpoints
// as the root records them. Shards closes what it returns.
type Dialer func(ctx context.Context, id string, endpoints []string) (*clientv3.Client, error)

// Option configures New and Create.
type Option func(*Shards)

// WithDialer sets how a Shards (and Create) makes the client of each member
// cluster (default: clientv3.New with the endpoints, a 5 s dial timeout and
// the logger of WithLogger), for TLS, credentials or a test's own client.
// A nil d makes New and Create fail with etcdlock.ErrInvalidArgument.
func WithDialer(d Dialer) Option {
	return func(r *Shards) {
		if d == nil {
			r.bad = errors.New("nil dialer")
		}
		r.dial = d
	}
}

// WithLogger sets the logger of the map watch and of the default Dialer's
// clients (default zap.NewNop()). A nil l makes New and Create fail with
// etcdlock.ErrInvalidArgument.
func WithLogger(l *zap.Logger) Option {
	return func(r *Shards) {
		if l == nil {
			r.bad = errors.New("nil logger")
		}
		r.log = l
	}
}

// dialerWith is the default Dialer, its clients logging to log.
func dialerWith(log *zap.Logger) Dialer {
	return func(ctx context.Context, _ string, endpoints []string) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second,
			Context: context.WithoutCancel(ctx), Logger: log})
	}
}

// withOptions returns a Shards of root with opts applied, not yet loaded;
// op names the call in its errors.
func withOptions(op string, root *clientv3.Client, opts []Option) (*Shards, error) {
	r := &Shards{root: root, log: zap.NewNop(), clients: map[string]*clientv3.Client{}, dialed: map[string][]string{}}
	for _, o := range opts {
		if o == nil {
			return nil, newError(op, "", fmt.Errorf("%w: nil option", etcdlock.ErrInvalidArgument))
		}
		o(r)
	}
	switch {
	case r.bad != nil:
		return nil, newError(op, "", fmt.Errorf("%w: %w", etcdlock.ErrInvalidArgument, r.bad))
	case root == nil:
		return nil, newError(op, "", fmt.Errorf("%w: nil root client", etcdlock.ErrInvalidArgument))
	case r.dial == nil:
		r.dial = dialerWith(r.log)
	}
	return r, nil
}
